"""A hostile HTTP/2 peer speaking raw frames over plain TCP (prior-knowledge h2c): it opens gRPC
calls without a token and feeds each a request message it never finishes, as fast as the server's
flow-control windows let it, and it holds idle connections open to see when the server closes them.

It ignores the server's advertised MAX_CONCURRENT_STREAMS (its streams are all sent before the
server's SETTINGS are read), as an attacker would.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions

# The largest piece of a message sent at once: the default HTTP/2 frame size.
CHUNK = 16 * 1024


@dataclass
class StreamFate:
    """What became of one call the peer opened: bytes of its message sent, and how the server ended it."""

    sent: int = 0
    reset: bool = False
    grpc_status: str | None = None

    @property
    def refused(self) -> bool:
        """True when the server reset the stream or ended it with a non-OK grpc-status."""
        return self.reset or (self.grpc_status is not None and self.grpc_status != "0")


@dataclass
class RawPeer:
    """One HTTP/2 connection opened with the client preface and nothing else."""

    port: int
    source: str = ""  # the local address to connect from (another loopback address is another peer)
    sock: socket.socket = field(init=False)
    conn: h2.connection.H2Connection = field(init=False)
    goaway: h2.events.ConnectionTerminated | None = None
    closed: bool = False
    served: bool = False
    sent_bytes: int = 0  # everything written to the socket, the client preface included
    fates: dict[int, StreamFate] = field(default_factory=dict)

    def __post_init__(self) -> None:
        source = (self.source, 0) if self.source else None
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10, source_address=source)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config)
        self.conn.initiate_connection()
        self.flush()

    def flush(self) -> None:
        """Send whatever frames the connection has queued."""
        data = self.conn.data_to_send()
        if data and not self.closed:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True
            else:
                self.sent_bytes += len(data)

    def open_call(self, path: str, metadata: Sequence[tuple[str, str]] = ()) -> int:
        """Send the HEADERS of a gRPC call to path and return its stream id (no message yet)."""
        stream_id = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", f"127.0.0.1:{self.port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *metadata,
        ]
        self.conn.send_headers(stream_id, headers)
        self.fates[stream_id] = StreamFate()
        return stream_id

    def feed(self, stream_id: int, message: bytes) -> None:
        """Send more of message on the stream, as much as flow control allows; never end the stream."""
        fate = self.fates[stream_id]
        while fate.sent < len(message) and not fate.refused and fate.grpc_status is None:
            try:
                window = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size)
            except h2.exceptions.StreamClosedError:
                return
            if window <= 0:
                return
            piece = message[fate.sent : fate.sent + min(window, CHUNK)]
            try:
                self.conn.send_data(stream_id, piece)
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                return
            fate.sent += len(piece)

    def receive(self) -> None:
        """Read what the server sent and note resets, statuses and GOAWAY (the socket must be readable)."""
        try:
            data = self.sock.recv(1 << 20)
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.StreamReset) and event.stream_id in self.fates:
                self.fates[event.stream_id].reset = True
            elif isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                for name, value in event.headers or ():
                    if name in ("grpc-status", b"grpc-status") and event.stream_id in self.fates:
                        self.fates[event.stream_id].grpc_status = value.decode() if isinstance(value, bytes) else value
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway = event
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                self.served = True
        self.flush()

    def close(self) -> None:
        """Close the socket."""
        self.closed = True
        self.sock.close()


def pump(peers: Sequence[RawPeer], seconds: float) -> None:
    """Read from every open peer for up to seconds (returns sooner when one has something)."""
    with selectors.DefaultSelector() as selector:
        for peer in peers:
            if not peer.closed:
                selector.register(peer.sock, selectors.EVENT_READ, peer)
        if not selector.get_map():
            time.sleep(seconds)
            return
        for key, _ in selector.select(seconds):
            key.data.receive()


def grpc_frame(message_length: int) -> bytes:
    """An uncompressed gRPC length-prefixed message of message_length bytes: a StartReview-shaped
    string field 3 (body) filling it."""
    body = b"\x1a" + _varint(message_length - 1 - len(_varint(message_length)))
    body += b"b" * (message_length - len(body))
    return b"\x00" + message_length.to_bytes(4, "big") + body


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


@dataclass
class FloodReport:
    """The flood's outcome: each stream's fate, the server's RSS (KiB) before, at peak and after,
    and what the caller's concurrent work returned."""

    fates: list[StreamFate]
    rss_before: int
    rss_peak: int
    rss_after: int
    during_error: BaseException | None = None

    @property
    def all_refused(self) -> bool:
        """True when the server refused (reset, or ended with a non-OK status) every stream."""
        return all(fate.refused for fate in self.fates)


def flood(
    port: int,
    path: str,
    rss_kib: Callable[[], int],
    *,
    connections: int = 2,
    streams: int = 100,
    message_bytes: int = 1024 * 1024,
    hold_seconds: float = 20,
    during: Callable[[], None] | None = None,
) -> FloodReport:
    """Open connections x streams calls to path without a token, feed each all but the last byte of
    a message_bytes message (so it never completes), and hold them until every stream is refused
    (or hold_seconds pass); meanwhile run during() on a thread. The RSS is sampled throughout;
    "after" is read once the flood's sockets are closed and the server had a moment to free them."""
    rss_before = rss_kib()
    peak = rss_before
    message = grpc_frame(message_bytes)[:-1]
    peers = [RawPeer(port) for _ in range(connections)]
    for peer in peers:
        for _ in range(streams):
            peer.open_call(path)
        peer.flush()
    outcome: list[BaseException | None] = []

    def run_during() -> None:
        try:
            if during is not None:
                during()
            outcome.append(None)
        except BaseException as error:  # reported to the caller, who asserts on it
            outcome.append(error)

    worker = threading.Thread(target=run_during, name="during-flood")
    worker.start()
    deadline = time.monotonic() + hold_seconds
    try:
        while time.monotonic() < deadline:
            for peer in peers:
                for stream_id in peer.fates:
                    peer.feed(stream_id, message)
                peer.flush()
            pump(peers, 0.05)
            peak = max(peak, rss_kib())
            settled = all(fate.refused for peer in peers for fate in peer.fates.values())
            if settled and not worker.is_alive():
                break
        worker.join(hold_seconds)
        fates = [fate for peer in peers for fate in peer.fates.values()]
    finally:
        for peer in peers:
            peer.close()
    time.sleep(1)
    rss_after = rss_kib()
    return FloodReport(fates, rss_before, max(peak, rss_after), rss_after, outcome[0] if outcome else None)


def served_peer(port: int, seconds: float) -> RawPeer:
    """Open a connection the server has accepted and counted: it answered with its SETTINGS. A
    connection the server closes at once (a previous one not yet counted down) is retried."""
    deadline = time.monotonic() + seconds
    while True:
        peer = RawPeer(port)
        while not peer.served and not peer.closed and time.monotonic() < deadline:
            pump([peer], 0.1)
        if peer.served:
            return peer
        peer.close()
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no connection to port {port} was served within {seconds:.0f} s")
        time.sleep(0.2)


def wait_for_goaway(peer: RawPeer, seconds: float) -> h2.events.ConnectionTerminated | None:
    """Hold the idle connection up to seconds; return the server's GOAWAY (None if none came)."""
    deadline = time.monotonic() + seconds
    while peer.goaway is None and not peer.closed and time.monotonic() < deadline:
        pump([peer], 0.1)
    return peer.goaway
