"""The shared launcher: a service started as a child process is ready when it says so, and stops cleanly."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from decisionflow_demo.launch import RECEIVER_MODULE, receiver_args
from decisionflow_server.foundation.processes import (
    ServiceStartError,
    free_port,
    launch,
    spawn,
    wait_for_port_file,
    write_port_file,
)


def test_a_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        assert sock.getsockname()[1] == port


@pytest.mark.slow
def test_a_spawned_service_serves_then_stops_on_sigterm(tmp_path: Path) -> None:
    receiver = spawn(RECEIVER_MODULE, receiver_args(f"sqlite:///{tmp_path / 'r.db'}"), tmp_path, "receiver")
    try:
        receiver.wait_serving(timeout=20)
        assert receiver.port > 0 and receiver.rss_kib() > 0
    finally:
        status = receiver.stop(timeout=15)
    assert status == 0
    assert '"event": "listening"' in receiver.stdout_path.read_text()


@pytest.mark.slow
def test_a_service_that_exits_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    args = receiver_args(f"sqlite:///{tmp_path / 'r.db'}", failpoints="no.such.failpoint=raise")
    service = launch(RECEIVER_MODULE, args, tmp_path, "receiver")
    with pytest.raises(ServiceStartError, match="receiver exited with status 2 at start") as failed:
        service.wait_ready(timeout=20)
    assert "no.such.failpoint" in str(failed.value)


def test_a_port_file_still_empty_is_waited_for_not_read_as_a_number(tmp_path: Path) -> None:
    # A writer that creates the file before it writes the number (the console did): the reader waits.
    port_file = tmp_path / "console.port"
    port_file.write_text("", encoding="ascii")
    writer = threading.Timer(0.3, lambda: port_file.write_text("4242\n", encoding="ascii"))
    writer.start()
    try:
        assert wait_for_port_file(port_file, lambda: True, timeout=10) == 4242
    finally:
        writer.join()
    assert wait_for_port_file(tmp_path / "never.port", lambda: False, timeout=10) is None
    write_port_file(tmp_path / "written.port", 5151)
    assert (tmp_path / "written.port").read_text(encoding="ascii") == "5151\n"
    assert not (tmp_path / "written.port.partial").exists()
