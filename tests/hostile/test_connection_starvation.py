"""Connections that never authenticate cannot starve a caller that does: against a receiver process
with ``--max-connections 20``, three attacking addresses (127.0.0.2 to 127.0.0.4) keep 12 raw HTTP/2
connections each (the client preface and SETTINGS, then nothing), reopening each as soon as it is
closed, while a client from 127.0.0.1 opens a new connection for every health check and
authenticated Lookup. Each attacker stays within its per-address share (10), so closing alone lost
every freed slot to them: the client was served 0 times in 82 attempts over 25 s. The guard now
keeps a quarter of the cap for connections that authenticate and refuses new connections from the
addresses whose unauthenticated connections it had to close (decisionflow_server.runtime.admission).

``--starvation-seconds`` runs it longer (default 20 s; past 30 s the refusals expire once and the
attackers get a slot back before they are refused again).
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from decisionflow_server.runtime.connection_guard import REFUSAL_SECONDS
from tests.hostile.test_idle_connections import _served, _start

ATTACKERS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
PER_ATTACKER = 12
# The first sweeps (every 0.5 s) have refused the attackers by then, on a loaded machine too.
SETTLING = 5.0
# The client preface and an empty SETTINGS frame: a connection that has finished gRPC's handshake.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


class Attack:
    """Threads that each keep one preface-only connection from an address open, reconnecting at once."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stopping = threading.Event()
        self.opened: list[float] = []  # when each attacking connection was established
        self.attempts = 0
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._hold, args=(address,), daemon=True)
            for address in ATTACKERS
            for _ in range(PER_ATTACKER)
        ]

    def __enter__(self) -> Attack:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _hold(self, address: str) -> None:
        while not self.stopping.is_set():
            with self._lock:
                self.attempts += 1
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1, source_address=(address, 0)) as sock:
                    with self._lock:
                        self.opened.append(time.monotonic())
                    sock.sendall(PREFACE)
                    self._drain(sock)
            except OSError:
                continue  # refused at the listener (the connect timed out) or closed: again, at once

    def _drain(self, sock: socket.socket) -> None:
        sock.settimeout(0.5)
        while not self.stopping.is_set():
            try:
                if not sock.recv(65536):
                    return
            except TimeoutError:
                continue


@pytest.mark.slow  # a receiver process and an attack of --starvation-seconds
@pytest.mark.campaign
def test_unauthenticated_connections_cannot_starve_an_authenticated_caller(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    seconds = float(request.config.getoption("--starvation-seconds"))
    process, token = _start(tmp_path)
    served: list[tuple[float, bool]] = []
    try:
        with Attack(process.port) as attack:
            started = time.monotonic()
            while time.monotonic() - started < seconds:
                served.append((time.monotonic() - started, _served(process, token)))
                time.sleep(0.1)
        log = process.log()
    finally:
        assert process.stop() == 0
    count = sum(ok for _, ok in served)
    late = [ok for at, ok in served if at >= SETTLING]
    opened_late = sum(at - started >= SETTLING for at in attack.opened)
    print(
        f"\n{len(ATTACKERS)} attacking addresses x {PER_ATTACKER} connections, --max-connections 20, {seconds:g} s: "
        f"client served {count} of {len(served)} attempts, {sum(late)} of {len(late)} after the first "
        f"{SETTLING:g} s (refused at {[round(at, 1) for at, ok in served if not ok]}); attackers connected "
        f"{len(attack.opened)} times in {attack.attempts} attempts, {opened_late} after the first {SETTLING:g} s"
    )
    for address in ATTACKERS:
        assert f"refusing new connections from {address} for {REFUSAL_SECONDS:g} s" in log, log[-2000:]
    if seconds <= REFUSAL_SECONDS:
        # Within the refusal period: once the first sweeps have refused the attackers, every attempt
        # is served and no attacking connection is established.
        assert all(late)
        assert opened_late == 0
    # Past it, the attackers win slots back for about a sweep, and are refused again.
    assert count >= 0.8 * len(served)
