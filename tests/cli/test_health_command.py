"""``decisionflow health`` as a script uses it: one check, or ``--wait`` until a starting server serves."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from decisionflow.processes import free_port, launch
from decisionflow.stack import RECEIVER_MODULE, receiver_args


def _health(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "decisionflow.cli", "health", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def test_wait_reports_serving_once_a_late_server_starts(tmp_path: Path) -> None:
    port = free_port()
    waiting = _health("--target", f"127.0.0.1:{port}", "--wait", "30")
    time.sleep(1.0)
    assert waiting.poll() is None, "health --wait gave up before its time"
    receiver = launch(
        RECEIVER_MODULE,
        receiver_args(f"sqlite:///{tmp_path / 'r.db'}", address=f"127.0.0.1:{port}"),
        tmp_path,
        "receiver",
    )
    try:
        out, err = waiting.communicate(timeout=40)
    finally:
        receiver.stop()
    assert (waiting.returncode, out, err) == (0, "SERVING\n", "")


def test_nothing_listening_fails_with_one_line_after_the_wait() -> None:
    port = free_port()
    out, err = _health("--target", f"127.0.0.1:{port}", "--wait", "1", "--timeout", "0.5").communicate(timeout=30)
    assert out == ""
    assert err == f"decisionflow health: 127.0.0.1:{port}: UNAVAILABLE\n"


def test_a_wait_out_of_range_is_a_usage_error() -> None:
    checking = _health("--target", "127.0.0.1:1", "--wait", "-1")
    _out, err = checking.communicate(timeout=30)
    assert checking.returncode == 2
    assert "--wait must be 0 to 3600 seconds" in err
