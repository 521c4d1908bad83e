"""A real audit history for the tests of ``decisionflow audit export`` and ``verify``: an authenticated
stack whose orchestrator writes the leaves of real operations, ``decisionflow-orchestrator audit-keygen``
and ``audit-checkpoint`` run as child processes to make the key and sign checkpoints, and the auditor's
files (the verifier key, a kept checkpoint)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from decisionflow.transparency import decode_leaf
from decisionflow_server.storage import db
from tests.support.databases import copy_database, create_postgres_database, drop_postgres_database
from tests.support.review_cli import Cli, cli_in, proposal_file


def orchestrator_command(*args: str) -> dict[str, Any]:
    """Run ``decisionflow-orchestrator ARGS`` as a process (no DECISIONFLOW_ setting from this one); its report."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.main", *args],
        check=False,
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def keygen(key_file: Path, *extra: str) -> str:
    """Make a signing key file with ``audit-keygen``; return its verifier key."""
    return str(orchestrator_command("audit-keygen", "--out", str(key_file), *extra)["vkey"])


@dataclass
class History:
    """A stack whose real log the operator signs, and the auditor's files."""

    cli: Cli
    directory: Path
    key_file: Path  # the signing key, the operator's
    vkey_file: Path  # its verifier key, the auditor's
    older: Path  # a signed checkpoint's note, kept by the auditor
    approved: str = ""  # an operation approved and committed, when the history holds one

    @property
    def url(self) -> str:
        return self.cli.stack.orchestrator_url

    def start(self, case_id: str) -> str:
        """Start a review of case_id as the author; its operation id."""
        run = self.cli("start", str(proposal_file(self.directory, case_id)), principal="ava")
        assert run.exit_code == 0, run.stderr
        return str(run.document["operation_id"])

    def checkpoint(self, key_file: Path | None = None, *extra: str) -> dict[str, Any]:
        """Sequence the backlog and sign, as ``audit-checkpoint`` with key_file (default the log's key)."""
        key = key_file or self.key_file
        return orchestrator_command(
            "audit-checkpoint", "--database-url", self.url, "--audit-signing-key-file", str(key), *extra
        )

    def keep(self, checkpoint: dict[str, Any]) -> None:
        """Keep a signed checkpoint, as the auditor does, in the file ``older``."""
        assert checkpoint["signed"] is True
        self.older.write_text(checkpoint["checkpoint"]["signed_note"])

    def audit(self, *args: str, principal: str | None = None) -> tuple[int, str, str]:
        """Run ``decisionflow audit ARGS`` in process (against the stack as principal, when given)."""
        return self.cli.raw("audit", *args, principal=principal)

    def export(self, *scope: str, since: bool = True) -> Path:
        """``audit export`` of scope (default ``--all``) as the auditor, with the kept checkpoint; its path."""
        path = self.directory / "log.bundle.json"
        argv = ["export", *(scope or ("--all",)), "--out", str(path)]
        exit_code, _, err = self.audit(*argv, *(("--since", str(self.older)) if since else ()), principal="audrey")
        assert exit_code == 0, err
        return path

    def verify(self, bundle: Path, *extra: str, keys: Sequence[Path] = (), since: bool = True) -> tuple[int, str, str]:
        """``audit verify BUNDLE --public-key VKEY… [--since OLD]`` offline (keys: default the log's key file)."""
        trusted = [arg for key in (keys or (self.vkey_file,)) for arg in ("--public-key", str(key))]
        kept = ("--since", str(self.older)) if since else ()
        return self.audit("verify", str(bundle), *trusted, *kept, *extra)

    def sql(self, *statements: str, **params: object) -> None:
        """Tamper with the orchestrator's database, in one transaction."""
        engine = db.create_engine(self.url, pool_size=1)
        try:
            with engine.begin() as conn:
                for statement in statements:
                    conn.execute(sa.text(statement), params)
        finally:
            engine.dispose()


def new_history(cli: Cli, directory: Path, *, keys: bool = True) -> History:
    """A History on cli's stack with a fresh signing key and its verifier key file (keys=False: the files
    directory holds already); nothing signed yet."""
    key_file, vkey_file = directory / "audit.key", directory / "audit.vkey"
    if keys:
        vkey_file.write_text(keygen(key_file) + "\n")
    return History(cli, directory, key_file, vkey_file, directory / "kept-checkpoint.txt")


@dataclass
class HistoryImage:
    """A history built once and stopped: its files (keys, kept checkpoint, proposals), its databases, and
    what its builder returned (the operations a test looks for)."""

    files: Path
    orchestrator_url: str
    receiver_url: str
    approved: str = ""
    made: Any = None

    @contextmanager
    def copy(self, make_cli: Callable[..., Cli], directory: Path) -> Iterator[History]:
        """The image's files copied to directory, its databases copied (the orchestrator's to
        directory/test.db on SQLite, the receiver's to directory/receiver.db, make_stack's own), and a
        stack of make_cli's on the copies: a history as the builder left it, this test's alone."""
        shutil.copytree(self.files, directory, dirs_exist_ok=True)
        orchestrator_url = copy_database(self.orchestrator_url, directory, "test")
        try:
            receiver_url = copy_database(self.receiver_url, directory, "receiver")
            cli = make_cli(orchestrator_url=orchestrator_url, receiver_url=receiver_url)
            fresh = new_history(cli, directory, keys=False)
            fresh.approved = self.approved
            yield fresh
        finally:
            if not orchestrator_url.startswith("sqlite:"):
                drop_postgres_database(orchestrator_url)


@dataclass
class HistoryImages:
    """The histories built in this session (this worker's), by name and kind of database ("sqlite",
    "postgres"): each built once, on the first test to ask for it, and copied for every test."""

    factory: pytest.TempPathFactory
    images: dict[tuple[str, str], HistoryImage] = field(default_factory=dict)
    databases: list[str] = field(default_factory=list)

    def get(
        self,
        name: str,
        kind: str,
        capsys: pytest.CaptureFixture[str],
        build: Callable[[Cli, History], Any],
        **settings: object,
    ) -> HistoryImage:
        """The image of build's history on kind: build(cli, history) runs once, on a stack with settings (as
        make_cli takes them) whose databases are kept, its return value kept as the image's made."""
        if (name, kind) not in self.images:
            root = self.factory.mktemp(f"{name}-{kind}")
            (files := root / "files").mkdir()
            (stack := root / "stack").mkdir()
            if kind == "sqlite":
                orchestrator_url = f"sqlite:///{stack / 'orchestrator.db'}"
            else:
                orchestrator_url = create_postgres_database()
                self.databases.append(orchestrator_url)
            with cli_in(stack, capsys, orchestrator_url=orchestrator_url, **settings) as cli:
                history = new_history(cli, files)
                made = build(cli, history)
            image = HistoryImage(files, orchestrator_url, f"sqlite:///{stack / 'receiver.db'}", history.approved, made)
            self.images[name, kind] = image
        return self.images[name, kind]

    def drop(self) -> None:
        """Drop the images' PostgreSQL databases."""
        for url in self.databases:
            drop_postgres_database(url)


def bundle_leaves(bundle: Path) -> list[tuple[int, Any]]:
    """The bundle's leaves, decoded, with their indices."""
    return [
        (leaf["index"], decode_leaf(base64.b64decode(leaf["data"])))
        for leaf in json.loads(bundle.read_text())["leaves"]
    ]
