"""The listening socket's filter (decisionflow_server.runtime.admission), on real sockets: a connection request from a
refused address goes unanswered, every other address connects, and established connections, even
from an address refused after they were made, keep working."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from decisionflow_server.runtime import admission


@pytest.fixture(params=[(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::")], ids=["ipv4", "dual-stack"])
def listener(request: pytest.FixtureRequest) -> Iterator[socket.socket]:
    family, host = request.param
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        sock.listen(16)
        yield sock


def _connects(port: int, source: str) -> bool:
    target = "::1" if ":" in source else "127.0.0.1"
    try:
        with socket.create_connection((target, port), timeout=1.0, source_address=(source, 0)):
            return True
    except TimeoutError:
        return False


def _port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def test_a_refused_address_cannot_connect_and_others_can(listener: socket.socket) -> None:
    port = _port(listener)
    assert admission.refuse(port, ["127.0.0.2", "10.1.2.3"]) == 1
    assert not _connects(port, "127.0.0.2")
    assert _connects(port, "127.0.0.3")
    assert admission.refuse(port, []) == 1  # accepting every address again
    assert _connects(port, "127.0.0.2")


def test_an_ipv6_address_is_refused_on_a_dual_stack_listener() -> None:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
        sock.bind(("::", 0))
        sock.listen(16)
        port = _port(sock)
        admission.refuse(port, ["::1", "2001:db8::1"])
        assert not _connects(port, "::1")
        assert _connects(port, "127.0.0.1")


def test_established_connections_are_untouched(listener: socket.socket) -> None:
    port = _port(listener)
    admission.refuse(port, ["127.0.0.2"])
    target = "127.0.0.1"
    with socket.create_connection((target, port), timeout=2, source_address=("127.0.0.1", 0)) as client:
        accepted, _ = listener.accept()
        with accepted:
            accepted.settimeout(2)
            admission.refuse(port, ["127.0.0.1", "127.0.0.2"])  # now its own address is refused too
            client.sendall(b"x" * 200_000)
            received = 0
            while received < 200_000:
                received += len(accepted.recv(1 << 16))
            accepted.sendall(b"ok")
            assert client.recv(2) == b"ok"


def test_the_filter_stays_within_the_kernels_limit() -> None:
    addresses = [f"2001:db8::{i:x}" for i in range(admission.MAX_REFUSED)]
    assert len(admission.program(addresses)) // 8 <= 4096
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
        sock.bind(("::", 0))
        sock.listen(1)
        assert admission.refuse(_port(sock), addresses) == 1  # the kernel takes it
