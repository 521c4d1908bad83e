"""HPACK amplification from a raw HTTP/2 peer: each request inserts one large header into the
connection's HPACK dynamic table and then names that entry thousands of times, one byte each, so a
request of about 7 KB on the wire decodes to about 12 MB of metadata.

gRPC core bounds a request's decoded metadata by the limit it advertises in its SETTINGS
(``SETTINGS_MAX_HEADER_LIST_SIZE``, 16 KiB by default), but only once the peer has acknowledged
those SETTINGS; until then the HTTP/2 default applies, 16 MiB, with a random refusal between the
soft limit and that. A peer that sends its requests before it reads the server's SETTINGS (or never
acknowledges them) therefore gets some of them decoded whole and handed to the application. The
peer here does that by default; ``acknowledge_settings`` makes it complete the handshake first.
Shared by the hostile suite and ``bench.hpack``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from tests.support.flood import RawPeer, StreamFate, pump

# The name of the amplified header: any custom metadata key will do.
AMPLIFIED_KEY = "x-amplified"
RESOURCE_EXHAUSTED = str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
OK = str(grpc.StatusCode.OK.value[0])


@dataclass(frozen=True, slots=True)
class Amplification:
    """One header of value_bytes, inserted into the dynamic table and named references times per request."""

    value_bytes: int = 4000
    references: int = 3000

    def metadata(self) -> list[tuple[str, str]]:
        """The request's amplified metadata: the same header references times (the peer's HPACK encoder
        sends the first as a literal added to the table and every other one as a one-byte index)."""
        return [(AMPLIFIED_KEY, "v" * self.value_bytes)] * self.references

    @property
    def decoded_bytes(self) -> int:
        """The metadata one request decodes to, as HTTP/2 counts a header list (name, value and 32 each)."""
        return self.references * (len(AMPLIFIED_KEY) + self.value_bytes + 32)


@dataclass
class Tally:
    """Where amplified requests ended, and the bytes the peer sent for them."""

    requests: int = 0
    served: int = 0  # grpc-status 0: the application answered the call
    answered: int = 0  # another status from the service (INVALID_ARGUMENT, UNAUTHENTICATED): it got the metadata
    refused_by_grpc: int = 0  # RESOURCE_EXHAUSTED: gRPC core refused the metadata as too large
    reset: int = 0  # RST_STREAM (beyond the stream limit)
    unanswered: int = 0  # the connection closed or the wait ended first
    wire_bytes: int = 0
    answers: Counter[str] = field(default_factory=Counter)  # the grpc-status of each answered request

    def add(self, fates: Sequence[StreamFate], wire_bytes: int) -> None:
        """Count each stream's end and the bytes sent for them."""
        self.requests += len(fates)
        self.wire_bytes += wire_bytes
        for fate in fates:
            if fate.grpc_status == OK:
                self.served += 1
            elif fate.grpc_status == RESOURCE_EXHAUSTED:
                self.refused_by_grpc += 1
            elif fate.grpc_status is not None:
                self.answered += 1
                self.answers[fate.grpc_status] += 1
            elif fate.reset:
                self.reset += 1
            else:
                self.unanswered += 1

    def merge(self, other: Tally) -> None:
        """Add another tally's counts to this one."""
        for name in ("requests", "served", "answered", "refused_by_grpc", "reset", "unanswered", "wire_bytes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.answers.update(other.answers)

    @property
    def reached_application(self) -> int:
        """Requests whose whole metadata was decoded and handed to the service's code."""
        return self.served + self.answered


def grpc_message(serialized: bytes) -> bytes:
    """An uncompressed gRPC length-prefixed message around serialized request bytes."""
    return b"\x00" + len(serialized).to_bytes(4, "big") + serialized


def amplified_round(
    port: int,
    path: str,
    request: bytes,
    *,
    requests: int,
    connections: int = 1,
    amplification: Amplification = Amplification(),
    metadata: Sequence[tuple[str, str]] = (),
    acknowledge_settings: bool = False,
    seconds: float = 30,
) -> Tally:
    """Open connections at once and send requests calls to path on each, each call with metadata, the
    amplified header and the serialized request; wait until every stream has ended (or seconds pass
    or the server closes the connection), close them, and return where the calls ended.
    acknowledge_settings: read and acknowledge the server's SETTINGS before the first request, as a
    well-behaved client does."""
    peers: list[RawPeer] = []
    tally = Tally()
    try:
        peers.extend(RawPeer(port) for _ in range(connections))
        deadline = time.monotonic() + seconds
        while acknowledge_settings and not all(p.served or p.closed for p in peers) and time.monotonic() < deadline:
            pump(peers, 0.1)
        before = sum(peer.sent_bytes for peer in peers)
        for peer in peers:
            for _ in range(requests):
                stream_id = peer.open_call(path, [*metadata, *amplification.metadata()])
                peer.conn.send_data(stream_id, grpc_message(request), end_stream=True)
            peer.flush()
        while time.monotonic() < deadline and any(_waiting(peer) for peer in peers):
            pump(peers, 0.1)
        fates = [fate for peer in peers for fate in peer.fates.values()]
        tally.add(fates, sum(peer.sent_bytes for peer in peers) - before)
    finally:
        for peer in peers:
            peer.close()
    return tally


def _waiting(peer: RawPeer) -> bool:
    """The connection is open and one of its calls has not ended."""
    return not peer.closed and not all(fate.reset or fate.grpc_status is not None for fate in peer.fates.values())
