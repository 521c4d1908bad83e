"""The console's HTTP connections, bounded: a request head must arrive in time, a request body must
arrive in time and at a minimum rate, and the connections held at once are capped, slow unauthenticated
ones making room first.

uvicorn (0.54, h11) sets no timer while it waits for a request's head or body: its keep-alive timer
starts only after a response, and any byte received cancels it. Measured against the console before
this module: 1,000 connections that sent half a request line stayed open 60 s, and under a limit of
1,024 descriptors 1,100 of them made every request fail; later, 512 connections that each sent a whole
``POST /signout`` head with ``Content-Length: 100000`` and then one body byte every 5 s held the whole
cap, and 78 of 79 inbox loads by a signed-in reviewer failed. ``limit_concurrency`` does not help: it
answers 503 only once a request's head is complete. So each connection is in one of three phases, as
h11 reads the client's side:

- **waiting for a head** (opened, or answered and kept alive): closed when the head is not complete
  ``--header-timeout-seconds`` after the connection opened or its last response;
- **reading a body** (a head is complete, its body is not): closed when the body is not complete
  ``--body-timeout-seconds`` after its head, or when, after the first ``BODY_RATE_GRACE_SECONDS``, it
  has brought fewer than ``--body-min-bytes-per-second`` bytes per second on average. Only the seconds
  in which the console was reading count: while the application has not taken what arrived (uvicorn
  pauses reading), the client is not to blame;
- **being answered**: the whole request is in; nothing is timed here (the orchestrator's deadline is).

At ``--max-connections`` held, a new connection makes room by closing, of the connections waiting for
a head or reading the body of a request from no signed-in session, the one that has waited longest (a
slow client's); when there is none, the new connection itself is closed. So a flood of slow heads or
slow bodies ends at the cap, never at the descriptor limit, and cannot keep a whole request out: the
connection that carries it replaces a slow one. A signed-in person's body upload is never closed for
room. Before the console, a proxy should bound all of this too (docs/console.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from uvicorn.protocols.http.h11_impl import H11Protocol

# A body is given this long to reach the minimum rate (a browser's first packets, TCP's slow start),
# as Kestrel's MinRequestBodyDataRate grants 5 s; its total time is still bound by the body timeout.
BODY_RATE_GRACE_SECONDS = 5.0
# How often a body's rate and time are checked.
BODY_CHECK_SECONDS = 0.5

Headers = Sequence[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds on the console's connections (``--header-timeout-seconds``, ``--body-timeout-seconds``,
    ``--body-min-bytes-per-second``, ``--max-connections``)."""

    header_timeout_seconds: float
    """A connection whose request head is not complete this long after it opened, or after its last
    response, is closed."""
    body_timeout_seconds: float
    """A connection whose request body is not complete this long after its head is closed."""
    body_min_bytes_per_second: int
    """A connection whose request body brings fewer bytes per second than this on average, once
    BODY_RATE_GRACE_SECONDS have passed, is closed (0: no minimum)."""
    max_connections: int
    """Connections held at once; one more makes room by closing the slow unauthenticated one that has
    waited longest (or itself, when there is none)."""


def bounded_protocol(limits: ConnectionLimits, signed_in: Callable[[Headers], bool]) -> type[H11Protocol]:
    """Return uvicorn's h11 protocol with head and body timers and a cap on the connections held at
    once; signed_in tells from a request's headers whether it comes from a signed-in session."""
    # Imported here: ConnectionLimits is part of the console's configuration, which is read without the
    # console extra installed (the configuration reference, the tests' plugins under every Python).
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11Protocol(H11Protocol):
        """uvicorn's h11 protocol; heads and bodies must arrive in time, and the connections are capped."""

        _head_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None
        _waiting_since: float = 0.0
        _body_seconds: float = 0.0  # seconds of the body's read in which the console was reading
        _body_bytes: int = 0
        _body_signed_in: bool = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_head()
            if len(self.connections) > limits.max_connections:
                self._make_room()

        def data_received(self, data: bytes) -> None:
            if self._body_timer is not None:
                self._body_bytes += len(data)
            super().data_received(data)

        def handle_events(self) -> None:
            super().handle_events()
            self._follow_client()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._await_head()  # the next request's head, if the client keeps the connection

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            self._stop_body_timer()
            super().connection_lost(exc)

        @property
        def evictable(self) -> bool:
            """Whether this connection may be closed to make room: open, and waiting for a head or
            reading the body of a request from no signed-in session."""
            if self.transport.is_closing():
                return False
            return self._head_timer is not None or (self._body_timer is not None and not self._body_signed_in)

        def _make_room(self) -> None:
            # The slow connection that has waited longest goes (a flood of them cannot keep a whole
            # request out); none: this one goes.
            slow = [c for c in self.connections if isinstance(c, BoundedH11Protocol) and c.evictable and c is not self]
            oldest = min(slow, key=lambda c: c._waiting_since, default=self)
            oldest.transport.close()

        def _follow_client(self) -> None:
            state = self.conn.their_state
            if state is h11.IDLE and self._head_timer is None and not self.transport.is_closing():
                self._await_head()  # a body read after its early answer has ended: the next head is timed
            elif state is not h11.IDLE:
                self._stop_head_timer()  # a head is complete: its request runs
            if state is h11.SEND_BODY and self._body_timer is None and not self.transport.is_closing():
                self._read_body()
            elif state is not h11.SEND_BODY:
                self._stop_body_timer()

        def _await_head(self) -> None:
            self._stop_head_timer()
            self._waiting_since = self.loop.time()
            self._head_timer = self.loop.call_later(limits.header_timeout_seconds, self._head_timed_out)

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def _read_body(self) -> None:
            self._waiting_since = self.loop.time()
            self._body_seconds = 0.0
            self._body_bytes = len(self.cycle.body)  # what came with the head
            self._body_signed_in = signed_in(self.headers)
            self._body_timer = self.loop.call_later(BODY_CHECK_SECONDS, self._check_body)

        def _stop_body_timer(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _check_body(self) -> None:
            self._body_timer = None
            if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
                return
            if not self.flow.read_paused:
                self._body_seconds += BODY_CHECK_SECONDS
            if body_too_slow(limits, self._body_seconds, self._body_bytes):
                self.transport.close()
                return
            self._body_timer = self.loop.call_later(BODY_CHECK_SECONDS, self._check_body)

    return BoundedH11Protocol


def body_too_slow(limits: ConnectionLimits, seconds: float, received: int) -> bool:
    """Whether a body read for seconds (while the console was reading) that has brought received bytes
    breaks the limits: past the body timeout, or below the minimum rate once the grace has passed."""
    if seconds >= limits.body_timeout_seconds:
        return True
    return seconds > BODY_RATE_GRACE_SECONDS and received < limits.body_min_bytes_per_second * seconds


def uvicorn_limits(limits: ConnectionLimits, signed_in: Callable[[Headers], bool]) -> dict[str, Any]:
    """The uvicorn.Config arguments that bound the console's connections."""
    return {"http": bounded_protocol(limits, signed_in), "h11_max_incomplete_event_size": 16384}
