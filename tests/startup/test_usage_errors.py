"""A value refused while the arguments are parsed (a number that is not one, a missing key or token
file) is said in one line, ``<program>: error: <what>``, with exit status 2 and no usage text, by
every server command, its housekeeping and schema commands, the reconciler and the relay. Each case runs the
real console script as a child process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from decisionflow_server.foundation.processes import child_environment

# Eighteen real commands, each a new process: `make test` runs them, `make check` does not.
pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
MISSING = "/nonexistent/decisionflow-secret"

CASES = [
    ("decisionflow-receiver", ["--workers", "abc"], "--workers"),
    ("decisionflow-receiver", ["serve", "--database-url-file", MISSING], "--database-url-file"),
    ("decisionflow-receiver", ["migrate", "--database-url-file", MISSING], "--database-url-file"),
    ("decisionflow-receiver", ["prune-keys", "--key-retention-seconds", "soon"], "--key-retention-seconds"),
    ("decisionflow-orchestrator", ["--workers", "abc"], "--workers"),
    ("decisionflow-orchestrator", ["--checkpoint-keys-file", MISSING], "--checkpoint-keys-file"),
    ("decisionflow-orchestrator", ["--receiver-token-file", MISSING], "--receiver-token-file"),
    ("decisionflow-orchestrator", ["migrate", "--database-url-file", MISSING], "--database-url-file"),
    ("decisionflow-orchestrator", ["prune-checkpoints", "--older-than-days", "x"], "--older-than-days"),
    ("decisionflow-orchestrator", ["reopen-reviews", "--checkpoint-keys-file", MISSING], "--checkpoint-keys-file"),
    ("decisionflow-reconciler", ["--token-file", MISSING], "--token-file"),
    ("decisionflow-reconciler", ["--interval", "often"], "--interval"),
    ("decisionflow-reconciler", ["--no-such-flag"], "--no-such-flag"),
    ("decisionflow-relay", ["--token-file", MISSING, "--cursor-file", "c"], "--token-file"),
    ("decisionflow-relay", [], "--cursor-file"),
    ("decisionflow-relay", ["--cursor-file", "c", "--subject-prefix", "a.>"], "--subject-prefix"),
    ("decisionflow-relay", ["--cursor-file", "c", "--nats-url", "127.0.0.1:4222"], "--nats-url"),
    ("decisionflow-relay", ["--cursor-file", "c", "--stream-replicas", "7"], "--stream-replicas"),
]


@pytest.mark.parametrize(("script", "args", "flag"), CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES])
def test_a_refused_argument_is_one_line_with_exit_2(script: str, args: list[str], flag: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(BIN / script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=child_environment(),
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(script) and ": error: " in line, line
    assert flag in line, line
    assert "usage:" not in done.stderr and done.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing written
