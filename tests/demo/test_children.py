"""The demo's process handling: a child that ignores SIGTERM is killed, and command output is read as JSON."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from decisionflow_demo.children import Children, DemoError, Finished, Service, child_environment


def test_a_service_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path: Path) -> None:
    children = Children(tmp_path, child_environment(), tmp_path, stop_timeout=0.5)
    ignoring = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    )
    stubborn = subprocess.Popen([sys.executable, "-c", ignoring], stdout=subprocess.PIPE)
    children.services.append(Service("stubborn", stubborn, 0, tmp_path / "stubborn.log"))
    assert stubborn.stdout is not None
    with stubborn.stdout:
        assert stubborn.stdout.readline() == b"ready\n"  # its handler is in place

    children.close()

    # Killed (SIGKILL) once the stop timeout passed: it would otherwise have slept on and exited 0.
    assert stubborn.returncode == -9
    assert children.services == []


def test_a_service_that_exits_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    children = Children(tmp_path, child_environment(), tmp_path, start_timeout=20)
    # The receiver refuses an unknown failpoint with a usage error before it serves.
    service = children.launch("receiver", "effect_receiver.main", ["--failpoints", "no.such.failpoint=raise"])

    with pytest.raises(DemoError, match="receiver exited with status 2 at start") as failed:
        children.wait_ready(service)

    assert "no.such.failpoint" in str(failed.value)
    assert children.services == []


def test_a_command_document_is_its_last_stdout_line() -> None:
    done = Finished(("x",), 42, 'noise\n{"outcome": "UNKNOWN"}\n', "first\nthe summary\n")
    silent = Finished(("x",), 1, "", "")
    garbled = Finished(("x",), 1, "not json\n", "")

    assert done.document == {"outcome": "UNKNOWN"} and done.message == "the summary"
    assert silent.document == {} and silent.message == ""
    assert garbled.document == {}
