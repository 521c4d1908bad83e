"""The console's HTTP connections, bounded: a request head must arrive in time, and the connections held
at once are capped.

uvicorn (0.54, h11) sets no timer while it waits for a request's head: its keep-alive timer starts only
after a response, and any byte received cancels it. Measured against the console before this module:
1,000 connections that sent half a request line stayed open 60 s, and under a limit of 1,024
descriptors 1,100 of them made every request fail. ``limit_concurrency`` does not help: it answers 503
only once a request's head is complete. So each connection gets a head timer: opened at the
connection and again after each response, cancelled when a head is complete; a connection whose head
is not complete in ``--header-timeout-seconds`` is closed. At ``--max-connections`` held, a new
connection makes room by closing the one that has waited longest for a request head (a slow client's;
the new one itself when none waits), so a flood ends at the cap instead of at the descriptor limit and
cannot keep a whole request out. Before
the console, a proxy should bound both too (docs/console.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from uvicorn.protocols.http.h11_impl import H11Protocol


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds on the console's connections (``--header-timeout-seconds``, ``--max-connections``)."""

    header_timeout_seconds: float
    """A connection whose request head is not complete this long after it opened, or after its last
    response, is closed."""
    max_connections: int
    """Connections held at once; one more makes room by closing the one that has waited longest for a head."""


def bounded_protocol(header_timeout_seconds: float, max_connections: int) -> type[H11Protocol]:
    """Return uvicorn's h11 protocol with a head timer and a cap on the connections held at once."""
    # Imported here: ConnectionLimits is part of the console's configuration, which is read without the
    # console extra installed (the configuration reference, the tests' plugins under every Python).
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11Protocol(H11Protocol):
        """uvicorn's h11 protocol; a request head must be complete in time, and the connections are capped."""

        _head_timer: asyncio.TimerHandle | None = None

        _waiting_since: float | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_head()
            if len(self.connections) > max_connections:
                # At the cap the connection that has waited longest for a request head makes room (a slow
                # client's), so a flood of them cannot keep a whole request out; none waiting: this one goes.
                waiting = [c for c in self.connections if isinstance(c, BoundedH11Protocol) and c.waiting_for_head]
                oldest = min(waiting, key=lambda c: c._waiting_since or 0.0, default=self)
                oldest.transport.close()

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not None:  # a head is complete: its request runs
                self._stop_head_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_head()  # the next request's head, if the client keeps the connection

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            super().connection_lost(exc)

        @property
        def waiting_for_head(self) -> bool:
            """Whether this connection is open and still waiting for a request's head."""
            return self._head_timer is not None and not self.transport.is_closing()

        def _await_head(self) -> None:
            self._stop_head_timer()
            self._waiting_since = self.loop.time()
            self._head_timer = self.loop.call_later(header_timeout_seconds, self._head_timed_out)

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol


def uvicorn_limits(limits: ConnectionLimits) -> dict[str, Any]:
    """The uvicorn.Config arguments that bound the console's connections."""
    protocol = bounded_protocol(limits.header_timeout_seconds, limits.max_connections)
    return {"http": protocol, "h11_max_incomplete_event_size": 16384}
