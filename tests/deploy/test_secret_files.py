"""Secrets read from files: --checkpoint-keys-file and --database-url-file (exactly one of each pair,
clear errors that never quote the secret), token new through a symlinked credentials file, and a
.dockerignore that keeps the secrets, databases and virtual environment out of the build context."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from decisionflow_server.runtime.auth import load_credentials, token_sha256
from effect_receiver import config as receiver_config
from orchestrator import config as orchestrator_config
from tests.deploy.made import ROOT

KEY = "k" * 32
OTHER_KEY = "j" * 40


def test_checkpoint_keys_from_a_file(tmp_path: Path) -> None:
    keys = tmp_path / "checkpoint.keys"
    keys.write_text(f"{KEY},{OTHER_KEY}\n")
    by_flag = orchestrator_config.load(["--checkpoint-keys-file", str(keys)], {})
    by_env = orchestrator_config.load([], {"DECISIONFLOW_CHECKPOINT_KEYS_FILE": str(keys)})
    assert by_flag.checkpoint_keys == by_env.checkpoint_keys == (KEY.encode(), OTHER_KEY.encode())


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--checkpoint-keys", KEY], {"DECISIONFLOW_CHECKPOINT_KEYS_FILE": "FILE"}, "not both"),
        ([], {}, "--checkpoint-keys (env DECISIONFLOW_CHECKPOINT_KEYS) is required (or give --checkpoint-keys-file"),
        (["--checkpoint-keys-file", "MISSING"], {}, "No such file or directory"),
        (["--checkpoint-keys-file", "DIRECTORY"], {}, "Is a directory"),
        (["--checkpoint-keys-file", "SHORT"], {}, "key 1 of 1 is shorter"),
    ],
    ids=["both", "neither", "missing", "unreadable", "short"],
)
def test_checkpoint_keys_file_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str], message: str
) -> None:
    files = {"FILE": tmp_path / "keys", "MISSING": tmp_path / "missing", "DIRECTORY": tmp_path, "SHORT": tmp_path / "s"}
    files["FILE"].write_text(KEY)
    files["SHORT"].write_text("short-secret-text")
    argv = [str(files.get(a, a)) for a in argv]
    env = {k: str(files.get(v, v)) for k, v in env.items()}
    with pytest.raises(SystemExit) as exited:
        orchestrator_config.load(argv, env)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert message in error
    assert "short-secret-text" not in error and KEY not in error


@pytest.mark.parametrize(
    ("load", "prefix"),
    [(orchestrator_config.load, "ORCHESTRATOR"), (receiver_config.load, "RECEIVER")],
    ids=["orchestrator", "receiver"],
)
def test_database_url_from_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], load: Callable[..., Any], prefix: str
) -> None:
    url = "postgresql://svc:s3cret-password@db:5432/svc"
    file = tmp_path / "database.url"
    file.write_text(url + "\n")
    env = {"DECISIONFLOW_CHECKPOINT_KEYS": KEY}
    assert load(["--database-url-file", str(file)], env).database_url == url
    assert load([], {**env, f"DECISIONFLOW_{prefix}_DATABASE_URL_FILE": str(file)}).database_url == url
    assert load([], env).database_url.endswith(".db")  # the default still applies without a file

    with pytest.raises(SystemExit) as both:
        load(["--database-url-file", str(file), "--database-url", "other.db"], env)
    assert both.value.code == 2
    assert "give --database-url" in capsys.readouterr().err

    file.write_text("  \n")
    with pytest.raises(SystemExit) as empty:
        load(["--database-url-file", str(file)], env)
    assert empty.value.code == 2
    error = capsys.readouterr().err
    assert f"--database-url-file (env DECISIONFLOW_{prefix}_DATABASE_URL_FILE): '{file}'" in error


def test_housekeeping_reads_both_files(tmp_path: Path) -> None:
    database = tmp_path / "orchestrator.db"
    url_file = tmp_path / "database.url"
    url_file.write_text(f"sqlite:///{database}\n")
    keys = tmp_path / "checkpoint.keys"
    keys.write_text(KEY)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")},
        "DECISIONFLOW_ORCHESTRATOR_DATABASE_URL_FILE": str(url_file),
        "DECISIONFLOW_CHECKPOINT_KEYS_FILE": str(keys),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.main", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    # Housekeeping never creates a database; migrate (reading the same URL file) does.
    migrated = run("migrate")
    done = run("reopen-reviews", "--dry-run")
    assert migrated.returncode == 0, migrated.stderr
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["found"] == []
    assert database.exists()


def test_token_new_writes_through_a_symlinked_credentials_file(tmp_path: Path) -> None:
    real = tmp_path / "secrets" / "credentials.json"
    real.parent.mkdir()
    real.write_text('{"tokens": [], "certificates": []}\n')
    real.chmod(0o640)
    link_folder = tmp_path / "config"
    link_folder.mkdir()
    link = link_folder / "credentials.json"
    link.symlink_to(real)
    command = [
        sys.executable,
        "-m",
        "decisionflow_cli",
        "token",
        "new",
        "--principal",
        "ava",
        "--role",
        "author",
    ]
    issued = subprocess.run(
        [*command, "--file", str(link)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert issued.returncode == 0, issued.stderr
    assert link.is_symlink() and link.resolve() == real
    assert real.stat().st_mode & 0o777 == 0o640
    entries = load_credentials(real).tokens
    assert [(e.principal, e.sha256) for e in entries] == [("ava", token_sha256(issued.stdout.strip()))]
    assert sorted(p.name for p in link_folder.iterdir()) == ["credentials.json"]
    assert sorted(p.name for p in real.parent.iterdir()) == ["credentials.json"]


def _pattern(pattern: str) -> re.Pattern[str]:
    # Docker's matching: "*" and "?" stay within one path segment, "**" spans any number of them.
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _ignored(patterns: list[str], path: str) -> bool:
    # A pattern that matches a folder excludes everything under it.
    parts = path.split("/")
    folders = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(_pattern(p).fullmatch(candidate) for p in patterns for candidate in folders)


def _dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/HEAD",
        ".env",
        "deploy/secrets/credentials.json",
        "deploy/secrets/ca/ca.key",
        "deploy/kubernetes/overlays/production/common/secrets/checkpoint.keys",
        ".venvs/checkov/bin/python",
        "orchestrator.db",
        "state/receiver.db-wal",
        "decisionflow_server/__pycache__/x.pyc",
        ".mypy_cache/3.11/x.json",
        ".pytest_cache/v/cache",
        ".ruff_cache/x",
        "clients/typescript/node_modules/typescript/package.json",
        "clients/python/src/decisionflow_client.egg-info/PKG-INFO",
    ],
)
def test_dockerignore_keeps_secrets_databases_and_caches_out(path: str) -> None:
    patterns = _dockerignore()
    assert not any(p.startswith("!") for p in patterns)
    assert _ignored(patterns, path), path


@pytest.mark.parametrize(
    "path",
    [
        "pyproject.toml",
        "README.md",
        "decisionflow_cli/__init__.py",
        "orchestrator/main.py",
        "clients/python/pyproject.toml",
        "clients/python/src/decisionflow/client/__init__.py",
        "clients/python/src/decisionflow/v1/review_pb2.py",
    ],
)
def test_dockerignore_keeps_what_the_image_copies(path: str) -> None:
    assert not _ignored(_dockerignore(), path), path


@pytest.mark.parametrize(
    "path", [".env", ".env.tmp", "deploy/secrets/orchestrator-credentials/credentials.json", "deploy/secrets/ca/ca.key"]
)
def test_git_ignores_what_make_secrets_writes(path: str) -> None:
    # make-secrets.sh writes DECISIONFLOW_SECRETS_GID to .env (through .env.tmp) beside the secrets.
    checked = subprocess.run(
        ["git", "check-ignore", "--no-index", "--quiet", path], cwd=ROOT, capture_output=True, timeout=30, check=False
    )
    if checked.returncode == 128:
        pytest.skip(f"not a git checkout: {checked.stderr.decode(errors='replace').strip()}")
    assert checked.returncode == 0, f"git would offer to commit {path}"
