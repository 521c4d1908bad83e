"""A ban catches every caller behind the banned address: with ``--max-connections 20``, 25 idle
preface-only connections from 127.0.0.1 got 127.0.0.1 refused at the listening socket for 30 s, and a
legitimate caller from 127.0.0.1 then failed with DEADLINE_EXCEEDED, still after the idle connections
had closed. ``--trusted-peer-addresses`` names the addresses never banned (a proxy, a mesh sidecar,
a probe): the same caller is then served, while an untrusted address (127.0.0.2) is still banned.
Each ban is logged once, with its address and how long it lasts, and counted in
``decisionflow_peer_address_bans_total``."""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from decisionflow_server.foundation.processes import free_port
from decisionflow_server.foundation.settings import SettingError, networks, parse_settings, transport_settings
from decisionflow_server.runtime.connection_guard import REFUSAL_SECONDS, Connection, ConnectionGuard, ConnectionRules
from tests.hostile.test_idle_connections import HELD, _held_once_cut_to, _served, _served_within, _start
from tests.metrics.scrape import scrape
from tests.support.flood import RawPeer, pump

BANS = "decisionflow_peer_address_bans_total"


def _ban_line(address: str) -> str:
    return f"refusing new connections from {address} for {REFUSAL_SECONDS:g} s"


def _open_peers(port: int, source: str) -> list[RawPeer]:
    """Open HELD preface-only connections from source, stopping at the first that the server refuses."""
    peers = []
    for _ in range(HELD):
        try:
            peers.append(RawPeer(port, source))
        except OSError:
            break  # banned meanwhile: its connect() goes unanswered
    return peers


def _close(peers: Iterable[RawPeer]) -> None:
    for peer in peers:
        peer.close()


def _bans_within(metrics_port: int, peers: list[RawPeer], seconds: float) -> float:
    """Read from the peers until the server has banned an address or seconds passed; return its ban count."""
    deadline = time.monotonic() + seconds
    while (bans := scrape(metrics_port).value(BANS)) == 0 and time.monotonic() < deadline:
        pump(peers, 0.2)
    return bans


@pytest.mark.slow  # a receiver process, a ban and a health check that waits out its deadline
def test_a_caller_sharing_a_banned_address_is_refused(tmp_path: Path) -> None:
    metrics_port = free_port()
    process, token = _start(tmp_path, "--metrics-port", str(metrics_port))
    try:
        peers = _open_peers(process.port, "127.0.0.1")
        try:
            assert _bans_within(metrics_port, peers, 30) == 1
        finally:
            _close(peers)
        # The idle connections are gone, but their address is banned: so is the caller that shares it.
        assert not _served(process, token)
        log = process.log()
        assert scrape(metrics_port).value(BANS) == 1
    finally:
        assert process.stop() == 0
    assert log.count(_ban_line("127.0.0.1")) == 1, log[-3000:]


@pytest.mark.slow  # a receiver process and timeouts of seconds
def test_a_trusted_address_is_never_banned_and_others_still_are(tmp_path: Path) -> None:
    metrics_port = free_port()
    process, token = _start(
        tmp_path,
        *("--metrics-port", str(metrics_port), "--trusted-peer-addresses", "10.0.0.0/8, 127.0.0.1"),
        *("--first-call-timeout-seconds", "60"),  # the idle connections outlast the checks below
    )
    try:
        peers = _open_peers(process.port, "127.0.0.1")
        try:
            assert len(peers) == HELD  # never refused at connect
            # The excess beyond the address's share (10 of a cap of 20) is still closed, but the address
            # is not banned: a caller from it is served beside the idle connections. At its share, a new
            # connection that has not called yet when a sweep comes is excess too, so the caller retries
            # as clients do (a loaded machine can put a sweep between its connect and its call).
            assert _held_once_cut_to(peers, 10, within=30) == 10
            assert _served_within(process, token, 10)
        finally:
            _close(peers)
        assert scrape(metrics_port).value(BANS) == 0
        peers = _open_peers(process.port, "127.0.0.2")
        try:
            assert _bans_within(metrics_port, peers, 30) == 1
        finally:
            _close(peers)
        assert _served(process, token)
        log = process.log()
    finally:
        assert process.stop() == 0
    assert log.count(_ban_line("127.0.0.2")) == 1, log[-3000:]
    assert "refusing new connections from 127.0.0.1" not in log


def _conn(inode: int, address: str) -> Connection:
    return Connection(inode, inode, (address, 40000 + inode))


def test_a_guard_bans_each_untrusted_address_once_per_period_and_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    held = [_conn(i, "10.1.2.3") for i in range(1, 4)] + [_conn(i, "192.0.2.7") for i in range(4, 7)]
    closed: list[Connection] = []
    refused: list[set[str]] = []
    bans: list[None] = []

    def refuse(port: int, addresses: Iterable[str]) -> int:
        refused.append(set(addresses))
        return 1

    guard = ConnectionGuard(
        ConnectionRules(first_call_seconds=10, per_peer=2, unauthenticated=100, trusted=networks("10.0.0.0/8")),
        clock=lambda: now[0],
        connections=lambda port: [c for c in held if c not in closed],
        close=closed.append,
        refuse=refuse,
        on_ban=lambda: bans.append(None),
    )
    with caplog.at_level(logging.INFO, logger="decisionflow_server.runtime.connection_guard"):
        # Both addresses hold one beyond their share of 2: both excess connections are closed, only the
        # untrusted address is banned.
        assert guard.sweep() == [held[2], held[5]]
        assert refused == [{"192.0.2.7"}] and len(bans) == 1
        held.append(_conn(7, "192.0.2.7"))
        now[0] = 5.0
        assert guard.sweep() == [held[6]]  # breaking the rules again: the ban is renewed, not new
        assert len(bans) == 1
        now[0] = 5.0 + REFUSAL_SECONDS + 1
        guard.sweep()
    assert refused[-1] == set() and len(bans) == 1
    messages = [record.getMessage() for record in caplog.records]
    assert sum(_ban_line("192.0.2.7") in m for m in messages) == 1, messages
    assert not any("10.1.2.3" in m and "refusing" in m for m in messages), messages
    assert "accepting new connections from 192.0.2.7 again" in messages


def test_trusted_peer_addresses_are_addresses_and_networks() -> None:
    setting = transport_settings("RECEIVER").trusted_peer_addresses
    assert networks("") == ()
    assert [str(n) for n in networks("127.0.0.1, 10.0.0.0/8,fd00::/8")] == ["127.0.0.1/32", "10.0.0.0/8", "fd00::/8"]
    for bad in ("10.0.0.1/8", "localhost", "10.0.0.0/33"):
        with pytest.raises(
            SettingError,
            match=r"--trusted-peer-addresses \(env DECISIONFLOW_RECEIVER_TRUSTED_PEER_ADDRESSES\): expected IP",
        ):
            parse_settings(argparse.Namespace(), (setting,), {setting.env: bad})
