"""Connections that hold a slot of the connection budget without using it are closed.

gRPC's core caps the connections a server holds (``--max-connections``: one beyond the cap is
closed as soon as it is accepted), but it knows neither whether a connection is used nor who holds
it. Measured with grpcio 1.85 and 25 raw HTTP/2 connections against a cap of 20:

- a connection that sends the client preface and its SETTINGS has completed gRPC's handshake, so
  ``grpc.server_handshake_timeout_ms`` no longer applies to it; only the idle limit
  (``--max-connection-idle-seconds``, 300 s by default) closes it, and until then the cap refuses
  every other client (health UNAVAILABLE). A lower idle limit would close it too, but would also
  close every client's pooled connection between calls, and a peer could keep its connections
  alive with health checks, which need no credentials;
- a connection that sends only the preface (no SETTINGS) is closed by the handshake timeout,
  which the server sets to the first-call timeout below (closed 3.1 s after opening at 3 s);
- gRPC's Python API shows a connection only through the calls made on it (``context.peer()``):
  one that makes none is invisible to it.

So each server process looks at its own sockets (``/proc/self/fd``, Linux), every
``SWEEP_SECONDS``, and ends three kinds of connection to its port:

- one on which no call was admitted by authentication within ``--first-call-timeout-seconds``
  (with authentication off, any call to a service method counts; health checks and reflection,
  which need no credentials, never do); the server's one pass per call
  (``decisionflow_server.runtime.served_calls``) tells ``note_call`` of each admitted call, so the guard adds no
  layer of its own;
- beyond ``--max-connections-per-peer`` (default: half of ``--max-connections``) from one peer
  address, the excess, those never used and the newest first;
- beyond ``--max-unauthenticated-connections`` (default: three quarters of ``--max-connections``)
  without an admitted call in all, the excess, from the addresses holding the most of them, newest
  first: the rest of the cap is kept for connections that authenticate.

A connection is ended with shutdown(2) on a duplicate of its descriptor, checked to be the same
socket: gRPC reads the end of the stream and closes its side itself, so no descriptor is closed
under it. Each worker process (``--workers``) applies the cap and the share to the connections it
accepted. Closing acts within one sweep, so a peer that reconnects in a loop would take every freed
slot between sweeps; an address whose unauthenticated connections were closed as excess is therefore
refused new connections at the listening socket (decisionflow_server.runtime.admission) for ``REFUSAL_SECONDS``,
renewed while it keeps breaking the rules: banned. Every caller behind that address is banned with it
(a NAT, a node's SNAT, a mesh sidecar whose connections all come from loopback), so an address in
``--trusted-peer-addresses`` is never banned; its excess connections are still closed. Each ban is
logged once, with its address and how long it lasts, and counted (``on_ban``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from decisionflow_server.foundation.settings import Network
from decisionflow_server.runtime import admission
from decisionflow_server.runtime.admission import duplicate_socket, own_sockets
from decisionflow_server.runtime.periodic import PeriodicJob, Schedule, Wording

logger = logging.getLogger(__name__)

SWEEP_SECONDS = 0.5
# A sweep reads this process's own sockets: nothing transient, so any failure is a defect.
SWEEP_WORDING = Wording(
    paused="connection sweep paused, %s; trying again every %g s",
    resumed="connection sweep resumed after %d failed sweeps",
    failed="connection sweep failed; trying again in %g s",
)
# An address whose unused connections were closed as excess is refused new connections this long
# after the last time it was: its own connections close at the first-call timeout meanwhile, and a
# peer reconnecting as fast as it is closed gets a slot back at most once per period.
REFUSAL_SECONDS = 30.0
# A call noted before the sweep saw its connection is kept this long for that sweep to find it.
NOTE_MEMORY_SECONDS = 10.0

Peer = tuple[str, int]
"""A connection's remote end: the peer address (IPv4-mapped IPv6 written as IPv4) and port."""


@dataclass(frozen=True, slots=True)
class ConnectionRules:
    """How long a connection may go without an admitted call, and how many one peer address may hold."""

    first_call_seconds: float
    """A connection with no call admitted by authentication this long after it was first seen is closed."""
    per_peer: int
    """At most this many connections from one peer address; the excess is closed."""
    unauthenticated: int
    """At most this many connections without an admitted call in all; the excess is closed, taken from
    the addresses holding the most of them, and those addresses are refused new connections a while."""
    trusted: tuple[Network, ...] = ()
    """Peer addresses in these networks are never refused new connections (their excess is still closed)."""

    def trusts(self, address: str) -> bool:
        """True when address (as ``Peer`` writes it) is in a trusted network."""
        return bool(self.trusted) and _is_in(address, self.trusted)


@dataclass(frozen=True, slots=True)
class Connection:
    """One TCP connection this process accepted: its socket's inode, descriptor and remote end."""

    inode: int
    fd: int
    peer: Peer


# Parsed once per peer string (a connection's calls all carry the same one): ipaddress's parsing was
# 1.6% of a receiver's CPU under load when every admitted call paid for it.
@functools.lru_cache(maxsize=4096)
def parse_peer(peer: str) -> Peer | None:
    """Return the remote end of a gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``); None for others."""
    scheme, _, rest = urllib.parse.unquote(peer).partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return None
    host, _, port = rest.rpartition(":")
    try:
        return _address(host.strip("[]")), int(port)
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def _is_in(address: str, networks: tuple[Network, ...]) -> bool:
    parsed = ipaddress.ip_address(address)
    return any(parsed in network for network in networks)


def _address(host: str) -> str:
    address = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def to_close(
    connections: Sequence[Connection],
    first_seen: Mapping[int, float],
    used: frozenset[Peer],
    now: float,
    rules: ConnectionRules,
) -> tuple[list[Connection], list[Connection]]:
    """Return the connections to close: those unused past the first-call timeout, and the excess: those
    beyond a peer address's share (keeping the used ones, then the oldest), then the unused ones beyond
    the unauthenticated budget (from the addresses holding the most unused ones, newest first)."""
    unused = [
        c for c in connections if c.peer not in used and now - first_seen.get(c.inode, now) >= rules.first_call_seconds
    ]
    closing = {c.inode for c in unused}
    by_address: dict[str, list[Connection]] = {}
    for c in connections:
        if c.inode not in closing:
            by_address.setdefault(c.peer[0], []).append(c)
    excess: list[Connection] = []
    for held in by_address.values():
        held.sort(key=lambda c: (c.peer not in used, first_seen.get(c.inode, now), c.inode))
        excess.extend(held[rules.per_peer :])
        del held[rules.per_peer :]
    waiting = {address: [c for c in held if c.peer not in used] for address, held in by_address.items()}
    beyond = sum(map(len, waiting.values())) - rules.unauthenticated
    while beyond > 0:
        most = max(waiting.values(), key=len)
        excess.append(most.pop())  # the newest of the address holding the most
        beyond -= 1
    return unused, excess


def refused_addresses(excess: Iterable[Connection], used: frozenset[Peer], rules: ConnectionRules) -> set[str]:
    """Return the addresses to refuse new connections from: those whose unused connections were excess,
    but for the trusted ones."""
    return {c.peer[0] for c in excess if c.peer not in used and not rules.trusts(c.peer[0])}


def accepted_connections(port: int) -> list[Connection]:
    """Return this process's TCP connections whose local port is port (empty where /proc is absent)."""
    found = []
    for fd, inode, sock in own_sockets():
        try:
            local, remote = sock.getsockname(), sock.getpeername()
        except OSError:
            continue  # a listener, or not connected
        if local[1] == port:
            found.append(Connection(inode, fd, (_address(remote[0]), int(remote[1]))))
    return found


def shut_down(connection: Connection) -> None:
    """End connection (shutdown(2), both directions); its owner closes the descriptor on reading the end."""
    with duplicate_socket(connection.fd, connection.inode) as sock:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class ConnectionGuard:
    """Closes the connections of a server's port that break the rules; sweeps until stopped."""

    def __init__(
        self,
        rules: ConnectionRules,
        *,
        clock: Callable[[], float] = time.monotonic,
        connections: Callable[[int], list[Connection]] = accepted_connections,
        close: Callable[[Connection], None] = shut_down,
        refuse: Callable[[int, Iterable[str]], int] = admission.refuse,
        on_ban: Callable[[], object] | None = None,
    ) -> None:
        """on_ban is called once for each address that starts being refused (a renewal is not a new ban)."""
        self._port = 0  # none until watch()
        self._rules = rules
        self._clock = clock
        self._connections = connections
        self._close = close
        self._refuse: Callable[[int, Iterable[str]], int] | None = refuse
        self._on_ban = on_ban
        self._refused: dict[str, float] = {}  # address -> until when its new connections are refused
        self._first_seen: dict[int, float] = {}
        self._used: dict[Peer, float] = {}
        self._job: PeriodicJob | None = None

    def note_call(self, peer: str) -> None:
        """Note that a call was admitted on the connection from peer (a gRPC peer string)."""
        remote = parse_peer(peer)
        if remote is not None:
            self._used[remote] = self._clock()

    def sweep(self) -> list[Connection]:
        """Close the connections that break the rules now; return them."""
        now = self._clock()
        connections = self._connections(self._port)
        present = {c.inode for c in connections}
        self._first_seen = {inode: self._first_seen.get(inode, now) for inode in present}
        peers = {c.peer for c in connections}
        self._used = {p: t for p, t in self._used.items() if p in peers or now - t < NOTE_MEMORY_SECONDS}
        unused, excess = to_close(connections, self._first_seen, frozenset(self._used), now, self._rules)
        for connection in (*unused, *excess):
            self._close(connection)
        if unused or excess:
            logger.warning(
                "closed %d connections: %d without a call within %g s, %d beyond %d per peer address "
                "or %d without an authenticated call (%s)",
                len(unused) + len(excess),
                len(unused),
                self._rules.first_call_seconds,
                len(excess),
                self._rules.per_peer,
                self._rules.unauthenticated,
                _some({c.peer[0] for c in (*unused, *excess)}),
            )
        self._refuse_from(refused_addresses(excess, frozenset(self._used), self._rules), now)
        return [*unused, *excess]

    @property
    def refused(self) -> frozenset[str]:
        """The addresses whose new connections are refused now."""
        return frozenset(self._refused)

    def _refuse_from(self, addresses: set[str], now: float) -> None:
        """Refuse new connections from addresses for REFUSAL_SECONDS (renewed while they break the rules)."""
        before = set(self._refused)
        self._refused = {a: until for a, until in self._refused.items() if until > now}
        self._refused.update(dict.fromkeys(addresses, now + REFUSAL_SECONDS))
        if set(self._refused) == before or self._refuse is None:
            return
        try:
            self._refuse(self._port, self._refused)
        except OSError as error:
            logger.warning("cannot refuse connections at the listening socket (%s); closing them only", error)
            self._refuse = None
            return
        for address in sorted(set(self._refused) - before):
            logger.warning(
                "refusing new connections from %s for %g s (renewed while it keeps breaking the rules): its "
                "connections without an authenticated call were beyond its share or the server's budget; every "
                "caller from this address waits unanswered at connect meanwhile (--trusted-peer-addresses exempts it)",
                address,
                REFUSAL_SECONDS,
            )
            if self._on_ban is not None:
                self._on_ban()
        for address in sorted(before - set(self._refused)):
            logger.info("accepting new connections from %s again", address)

    def watch(self, port: int) -> None:
        """Sweep the connections to port every SWEEP_SECONDS on the running loop until stop()."""
        self._port = port
        self._job = PeriodicJob(
            "connection-sweep",
            lambda: asyncio.to_thread(self.sweep),
            Schedule(SWEEP_SECONDS, first_run_at_start=False),
            logger=logger,
            wording=SWEEP_WORDING,
            transient=(),
        )
        self._job.start()

    async def stop(self) -> None:
        """Stop sweeping."""
        if self._job is not None:
            await self._job.stop()
            self._job = None


def _some(addresses: Iterable[str]) -> str:
    listed = sorted(addresses)
    return ", ".join(listed[:5]) + (", …" if len(listed) > 5 else "")
