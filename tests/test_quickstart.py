"""README's step-by-step block, run as a reader runs it: bash, from the repository root, with the
reader's PATH; the servers it starts in the background are its own, and it must end with the
approval committed."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block() -> str:
    section = README.split("## By hand, step by step", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def _checkout_copy(into: Path) -> Path:
    """The files the block uses, copied with their times (so make sees the environment as set up),
    and the project's environment linked in, as in the reader's checkout."""
    (into / "clients" / "python").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml", "clients/python/pyproject.toml"):
        shutil.copy2(ROOT / name, into / name)
    shutil.copytree(ROOT / "examples", into / "examples")
    (into / ".venv").symlink_to(ROOT / ".venv")
    return into


@pytest.mark.slow
def test_the_step_by_step_block_approves_the_example(tmp_path: Path) -> None:
    root = _checkout_copy(tmp_path)
    script = "set -euo pipefail\n" + _block()
    shell = subprocess.Popen(
        ["bash", "-c", script],
        cwd=root,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        transcript, _ = shell.communicate(timeout=120)
    finally:
        # A failed step leaves its background servers behind: they are in the block's session.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
    assert shell.returncode == 0, transcript
    assert "started: case T-2001 operation op-v1-" in transcript, transcript
    assert "outcome COMMITTED for op-v1-" in transcript, transcript
    assert "COMMITTED, receipt rcpt-" in transcript, transcript
    assert "T-2001  COMMITTED  APPROVE" in transcript, transcript  # the operator's table
    assert (root / "quickstart" / "orchestrator.db").exists()
