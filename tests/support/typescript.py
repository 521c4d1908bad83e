"""The TypeScript client (clients/typescript) built for a test: ``npm ci`` when node_modules is
missing (from package-lock.json, so every version is the pinned one), then ``tsc`` unless dist/
was built from the very sources there now (their digest, kept in dist/).

Without node and npm the tests skip with the reason, unless ``DECISIONFLOW_REQUIRE_NODE=1`` or
``CI=true`` (as in CI), where they fail instead. One worker at a time installs and builds (a
lock file), so parallel workers never race over node_modules or dist/; the lock is held only while
building: the next worker finds dist/ built from the same sources and uses it as it is, and no
worker rewrites dist/ while another runs what it holds.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
# What tsc reads (tsconfig.json's include, and the pinned compiler and types); its digest is written
# beside what it built.
BUILT_FROM = PACKAGE / "dist" / ".built-from.sha256"
# One build per checkout at a time: xdist workers and make test's preparation (tests.support.prepare).
LOCK = ROOT / ".venvs" / "locks" / "typescript.lock"


def _require_node() -> bool:
    return os.environ.get("DECISIONFLOW_REQUIRE_NODE") == "1" or os.environ.get("CI") == "true"


@dataclass(frozen=True)
class TypeScriptPackage:
    """The built package: its folder and the node executable."""

    folder: Path
    node: str

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run node with args in the package folder."""
        return subprocess.run(
            [self.node, *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=self.folder
        )


def _step(argv: list[str], timeout: float) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, cwd=PACKAGE)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


@pytest.fixture(scope="session")
def typescript_package() -> Iterator[TypeScriptPackage]:
    """The TypeScript client, its dependencies installed (npm ci) and compiled (tsc)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        reason = "the TypeScript client needs node (20 or later) and npm on the PATH"
        if _require_node():
            pytest.fail(f"{reason}; required here (CI=true or DECISIONFLOW_REQUIRE_NODE=1)")
        pytest.skip(reason)
    build_client(node, npm)
    yield TypeScriptPackage(PACKAGE, node)


def build_client(node: str, npm: str) -> None:
    """npm ci unless node_modules is there, then tsc unless the sources are what it last compiled."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not (PACKAGE / "node_modules" / ".package-lock.json").exists():
            _step([npm, "ci", "--no-audit", "--no-fund"], timeout=600)
        digest = _sources_digest()
        if not BUILT_FROM.is_file() or BUILT_FROM.read_text() != digest:
            BUILT_FROM.unlink(missing_ok=True)
            _step([node, str(PACKAGE / "node_modules" / "typescript" / "bin" / "tsc"), "-p", "tsconfig.json"], 300)
            BUILT_FROM.write_text(digest)


def _sources_digest() -> str:
    sources = [PACKAGE / "tsconfig.json", PACKAGE / "package-lock.json"]
    sources += [path for folder in ("src", "examples") for path in (PACKAGE / folder).rglob("*.ts")]
    digest = hashlib.sha256()
    for path in sorted(sources):
        digest.update(f"{path.relative_to(PACKAGE)}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
