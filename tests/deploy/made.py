"""deploy/make-secrets.sh run the way the README says, in a copy of the repository, and
docker-compose.yml's secrets mapped onto the files it wrote."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SECRETS_MOUNT = "/run/secrets"


def documented_make_secrets_line(document: Path) -> str:
    """Return the first command line in document's code blocks that runs deploy/make-secrets.sh."""
    found: list[str] = []
    in_block = False
    for line in document.read_text().splitlines():
        if line.startswith("```"):
            in_block = not in_block
        elif in_block and "make-secrets.sh" in line:
            found.append(line.strip())
    assert found, f"{document.relative_to(ROOT)} shows no command line running deploy/make-secrets.sh"
    return found[0]


def readme_make_secrets_line() -> str:
    """Return the README's command line that runs deploy/make-secrets.sh (inside a code block)."""
    return documented_make_secrets_line(ROOT / "README.md")


def copy_repository(destination: Path) -> Path:
    """Copy the repository's files (tracked and untracked, not ignored) to destination and link its
    .venv to this checkout's, as a fresh clone after `make setup` would look."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:  # not a git checkout: copy the tree without what git would ignore
        shutil.copytree(ROOT, destination, symlinks=True, ignore=shutil.ignore_patterns(*_NOT_IN_A_CLONE))
    else:
        for name in filter(None, listed.stdout.decode().split("\0")):
            source = ROOT / name
            if not source.is_file():
                continue  # deleted in the working tree
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (destination / ".venv").symlink_to(ROOT / ".venv")
    return destination


_NOT_IN_A_CLONE = (".git", ".venv", ".env", "secrets", "__pycache__", "*.db", "*.db-*", ".*_cache", "state")


def environment_without_venv() -> dict[str, str]:
    """Return os.environ with no virtual environment on PATH and no DECISIONFLOW_ settings."""
    venv = str(ROOT / ".venv")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not p.startswith(venv)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW") and k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(path or ["/usr/bin", "/bin"])
    return env


def run_make_secrets(
    cwd: Path, *args: str, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run deploy/make-secrets.sh of the copy at cwd (no venv on PATH)."""
    env = environment_without_venv()
    env.update(extra_env or {})
    return subprocess.run(
        ["bash", "-c", " ".join(["deploy/make-secrets.sh", *args])],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@dataclass(frozen=True)
class MadeSecrets:
    """A repository copy in which the README's make-secrets line ran."""

    clone: Path

    @property
    def folder(self) -> Path:
        """The secrets folder docker-compose.yml mounts from."""
        return self.clone / "deploy" / "secrets"

    def mounts(self, service: str) -> dict[str, Path]:
        """Return the service's mounted paths (/run/secrets/...) mapped to the files they come from: its
        secrets, and each file of a secrets folder it mounts (secret_folders)."""
        mounted: dict[str, Path] = {}
        for entry in COMPOSE["services"][service].get("secrets", []):
            source = entry if isinstance(entry, str) else entry["source"]
            target = source if isinstance(entry, str) else entry.get("target", source)
            path = target if target.startswith("/") else f"{SECRETS_MOUNT}/{target}"
            mounted[path] = self.clone / COMPOSE["secrets"][source]["file"]
        for folder, target in secret_folders(COMPOSE["services"][service]).items():
            mounted |= {f"{target}/{file.name}": file for file in sorted((self.clone / folder).iterdir())}
        return mounted

    def local(self, service: str, value: str) -> str:
        """Return a compose value with the service's mounted paths replaced by the local files."""
        for path, file in self.mounts(service).items():
            value = value.replace(path, str(file))
        return value


def secret_folders(service: dict[str, Any]) -> dict[str, str]:
    """Return the folders of deploy/secrets a compose service mounts (bind volumes, each read-only) mapped to
    where: the credentials folders, which follow a file replaced in them (docs/deployment.md#rotating)."""
    folders: dict[str, str] = {}
    for volume in service.get("volumes", []):
        source, target, *options = volume.split(":")
        if source.startswith("./deploy/secrets/"):
            assert options == ["ro"], f"{source} is mounted writable"
            folders[source] = target
    return folders


def world_traversable_directory() -> Iterator[Path]:
    """Yield a fresh directory that another uid can traverse (pytest's tmp_path is private), then remove it."""
    directory = Path(tempfile.mkdtemp(prefix="decisionflow-deploy-"))
    try:
        directory.chmod(0o755)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_documented_line_in_a_copy(directory: Path, line: str) -> Path:
    """Copy the repository into directory, run a documented shell line there as a user would (the
    project's virtual environment not activated) and return the copy; the line must succeed."""
    clone = copy_repository(directory / "clone")
    made = subprocess.run(
        ["bash", "-c", line],
        cwd=clone,
        env=environment_without_venv(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return clone


def make_secrets_as_documented(directory: Path) -> MadeSecrets:
    """Copy the repository into directory and run the README's make-secrets line there."""
    return MadeSecrets(run_documented_line_in_a_copy(directory, readme_make_secrets_line()))


def mode(path: Path) -> int:
    """Return the permission bits of path."""
    return stat.S_IMODE(path.stat().st_mode)
