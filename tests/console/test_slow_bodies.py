"""Slow request bodies cannot hold the console, alone or beside slow heads: against a console process
with a cap of 40 connections, a flood of twice the cap, reconnecting whenever one is closed, of
``POST /signout`` heads declaring 100,000 bytes and then sending one byte a second (or half a request
line and nothing), does not keep a signed-in reviewer from loading the inbox, each load on a new
connection; once the flood stops reconnecting, the body timer closes every slow body and the head timer
every slow head. A client that leaves is logged and counted as 499, never as a server error."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx2
import pytest

from tests.support.console_process import console_process

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from decisionflow_demo.trial_identity import TrialIdentityProvider

CAP = 40
FLOOD = 2 * CAP
INBOX_LOADS = 20
LIMITS = (
    "--max-connections", str(CAP),
    "--header-timeout-seconds", "3",
    "--body-timeout-seconds", "30",
    "--body-min-bytes-per-second", "64",
)  # fmt: skip
SLOW_HEAD = b"GET /healthz HT"
SLOW_BODY = (
    b"POST /signout HTTP/1.1\r\nHost: console\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    b"Content-Length: 100000\r\n\r\ncsrf="
)


class SlowFlood:
    """FLOOD connections of the kinds given, each sending its start and then one byte a second (a slow
    head sends nothing more); while reconnecting, a connection the console closes is opened again."""

    def __init__(self, port: int, starts: list[bytes]) -> None:
        self._port = port
        self._starts = starts
        self._sockets: list[tuple[socket.socket, bytes] | None] = [None] * FLOOD
        self.reconnecting = True
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        """Open the flood and keep it going on a thread."""
        self._thread.start()

    def _open(self, index: int) -> None:
        start = self._starts[index % len(self._starts)]
        try:
            sock = socket.create_connection(("127.0.0.1", self._port), timeout=2)
            sock.sendall(start)
        except OSError:
            return
        sock.setblocking(False)
        self._sockets[index] = (sock, start)
        self.opened += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            for index, held in enumerate(self._sockets):
                if held is None:
                    if self.reconnecting:
                        self._open(index)
                    continue
                sock, start = held
                if _closed(sock):
                    sock.close()
                    self._sockets[index] = None
                elif start == SLOW_BODY:
                    with contextlib.suppress(OSError):
                        sock.send(b"a")
            self._stop.wait(1.0)

    def still_open(self) -> int:
        """Connections of the flood the console has not closed."""
        return sum(held is not None and not _closed(held[0]) for held in self._sockets)

    def stop(self) -> None:
        """Stop the thread and close every connection."""
        self._stop.set()
        self._thread.join(10)
        for held in self._sockets:
            if held is not None:
                held[0].close()


def _closed(sock: socket.socket) -> bool:
    """Whether the console has closed sock (a read sees its end, or a reset)."""
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _inbox_loads(reviewer: httpx2.Client) -> int:
    """Load the inbox INBOX_LOADS times as a signed-in reviewer, each on a new connection; return how many loaded."""
    loaded = 0
    for _ in range(INBOX_LOADS):
        try:
            page = reviewer.get("/inbox", headers={"Connection": "close"}, timeout=10)
        except httpx2.TransportError:
            continue
        loaded += page.status_code == 200 and 'id="person"' in page.text
        time.sleep(0.2)
    return loaded


@pytest.mark.slow  # a stack, a console process and timers of seconds
@pytest.mark.parametrize(
    ("flood_kind", "starts"),
    [("heads", [SLOW_HEAD]), ("bodies", [SLOW_BODY]), ("both", [SLOW_HEAD, SLOW_BODY])],
)
def test_a_flood_of_slow_clients_does_not_keep_a_reviewer_out(
    tmp_path: Path, trial_identity: TrialIdentityProvider, flood_kind: str, starts: list[bytes]
) -> None:
    with console_process(tmp_path, trial_identity, *LIMITS) as console:
        reviewer = console.signed_in("rita", ["reviewers"])
        flood = SlowFlood(console.process.port, starts)
        flood.start()
        try:
            deadline = time.monotonic() + 20
            while flood.opened < FLOOD and time.monotonic() < deadline:
                time.sleep(0.2)
            loaded = _inbox_loads(reviewer)
            assert loaded == INBOX_LOADS, f"{loaded} of {INBOX_LOADS} inbox loads during the flood"
            # No more reconnecting: the timers close what is left (3 s for a head; a body at one byte a
            # second falls below 64 bytes a second once its 5 s grace is over). A loaded machine gets 20 s.
            flood.reconnecting = False
            deadline = time.monotonic() + 20
            while flood.still_open() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert flood.still_open() == 0, f"{flood.still_open()} slow connections still open"
            opened = flood.opened
        finally:
            flood.stop()
        time.sleep(0.5)  # the last closed bodies' requests end on the console's loop
        served_errors = console.metric('decisionflow_console_requests_total{code="500",method="POST",route="/signout"}')
        assert served_errors is None
        lines = console.log_lines()
        assert not [line for line in lines if line.get("code") == 500]
        assert "ClientDisconnect" not in console.process.stderr()
        print(
            f"\n{flood_kind}: {opened} slow connections opened against a cap of {CAP}, "
            f"inbox loads {loaded}/{INBOX_LOADS}, all closed"
        )


def test_a_client_that_abandons_a_body_is_not_a_server_error(
    tmp_path: Path, trial_identity: TrialIdentityProvider
) -> None:
    with console_process(tmp_path, trial_identity) as console:
        sock = socket.create_connection(("127.0.0.1", console.process.port), timeout=5)
        sock.sendall(SLOW_BODY + b"abc")
        time.sleep(0.5)  # the request reaches the application, which waits for the rest of its body
        sock.close()
        sample = 'decisionflow_console_requests_total{code="499",method="POST",route="/signout"}'
        deadline = time.monotonic() + 10
        while console.metric(sample) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert console.metric(sample) == 1
        assert console.metric('decisionflow_console_requests_total{code="500",method="POST",route="/signout"}') is None
    access = [line for line in console.log_lines() if line.get("event") == "http_request"]
    assert [(line["message"], line["code"]) for line in access] == [("POST /signout 499", 499)]
    assert "ClientDisconnect" not in console.process.stderr()
    assert "Traceback" not in console.process.stderr()


def test_a_body_that_never_ends_is_closed_and_a_signed_in_upload_keeps_its_place(
    tmp_path: Path, trial_identity: TrialIdentityProvider
) -> None:
    limits = ("--max-connections", "8", "--body-timeout-seconds", "4", "--body-min-bytes-per-second", "0")
    with console_process(tmp_path, trial_identity, *limits) as console:
        reviewer = console.signed_in("rita", ["reviewers"])
        cookie = "; ".join(f"{name}={value}" for name, value in reviewer.cookies.items())
        signed_in = socket.create_connection(("127.0.0.1", console.process.port), timeout=5)
        signed_in.sendall(SLOW_BODY.replace(b"\r\n\r\n", f"\r\nCookie: {cookie}\r\n\r\n".encode(), 1))
        anonymous = socket.create_connection(("127.0.0.1", console.process.port), timeout=5)
        anonymous.sendall(SLOW_BODY)
        time.sleep(0.5)  # both heads are read: both are reading a body
        # Twice the cap of new connections: each makes room, and the anonymous body is the oldest slow one.
        flood = [socket.create_connection(("127.0.0.1", console.process.port), timeout=5) for _ in range(16)]
        time.sleep(0.5)
        for sock in (signed_in, anonymous):
            sock.setblocking(False)
        assert _closed(anonymous)
        assert not _closed(signed_in)
        # The signed-in upload goes on sending, but its body is never complete: the body timeout ends it.
        deadline = time.monotonic() + 20
        while not _closed(signed_in) and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                signed_in.send(b"a" * 100)
            time.sleep(0.2)
        assert _closed(signed_in)
        for sock in (signed_in, anonymous, *flood):
            sock.close()
