"""EventsClient and AsyncEventsClient: the orchestrator's event feed (EventService.WatchEvents,
docs/events.md); ``wait_for_outcome`` (decisionflow.client.waiting) is built on it.

``watch`` yields every matching event from a cursor on and follows the log. It keeps the cursor itself:
after each event its index plus one, after each heartbeat the heartbeat's ``next_index``. When the stream
breaks on a status that says to come back (UNAVAILABLE: a restart, a failover, WATCH_FELL_BEHIND) it
reconnects from that cursor, after a back-off that starts at 0.1 s and doubles to 5 s, so the caller
sees every event once, in index order, across reconnections. Any other refusal is raised as the typed
error (``decisionflow.client.errors``).

``wait_for_outcome(operation_id, timeout)`` returns the operation, as GetOperation answers it, once it is
settled (``SETTLED_STATES``); the stream only says when to ask. Its order makes it miss nothing: it reads
the operation, opens the stream "from now" on the operation's case, reads the operation again, and then
asks again after each event of the case. An outcome reached between two of those steps is either seen by
the second read or sequenced after the stream's start. UNKNOWN is not settled: the reconciler settles it,
and that settlement is an event.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

import grpc

from decisionflow import vocabulary_wire as wire
from decisionflow.client._calls import AsyncClient, Client
from decisionflow.client.errors import map_rpc_error
from decisionflow.client.views import OperationView
from decisionflow.timestamps import from_timestamp
from decisionflow.v1 import events_pb2, events_pb2_grpc
from decisionflow.vocabulary import Decision, OperationState

KINDS = ("proposal", "decision", "effect", "rejection", "settlement", "expiry", "vote", "escalation", "reroute")
"""The kinds of event, as ``EventView.kind`` spells them (the proto's ``EVENT_KIND_`` names, lower case)."""

SETTLED_STATES = frozenset(
    {
        OperationState.COMMITTED,
        OperationState.DECLINED,
        OperationState.REJECTED,
        OperationState.EXPIRED,
        OperationState.SUPERSEDED,
    }
)
"""States ``wait_for_outcome`` returns in: nothing more happens to the operation's effect on its own."""

# Back-off between reconnections: from the first, doubling, to the most.
FIRST_BACKOFF = 0.1
MOST_BACKOFF = 5.0
# Statuses after which a watch reconnects from its cursor.
RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE})


@dataclass(frozen=True, slots=True)
class EventView:
    """One event: an audit log leaf (index and canonical bytes, provable with ``AuditClient``) and what it says."""

    index: int
    leaf: bytes
    kind: str
    case_id: str
    operation_id: str
    action: str
    state: OperationState
    principal: str
    occurred_at: datetime | None
    decision: Decision


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The stream's position while nothing matched: every matching event below next_index was sent."""

    next_index: int
    sent_at: datetime | None


class WaitTimedOut(TimeoutError):
    """wait_for_outcome's timeout passed before the operation settled; operation is its last answer."""

    def __init__(self, operation: OperationView, timeout: float) -> None:
        super().__init__(f"{operation.operation_id} is still {operation.state.value} after {timeout:g} s")
        self.operation = operation


def _kind_to_pb(kind: str) -> events_pb2.EventKind.ValueType:
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r} (known: {', '.join(KINDS)})")
    return events_pb2.EventKind.Value("EVENT_KIND_" + kind.upper())


def event_view(event: events_pb2.Event) -> EventView:
    """The view of an event message."""
    name = events_pb2.EventKind.Name(event.kind) if event.kind in events_pb2.EventKind.values() else ""
    return EventView(
        index=event.index,
        leaf=event.leaf,
        kind=name.removeprefix("EVENT_KIND_").lower(),
        case_id=event.case_id,
        operation_id=event.operation_id,
        action=event.action,
        state=wire.state_from_pb(event.state),
        principal=event.principal,
        occurred_at=from_timestamp(event.occurred_at) if event.HasField("occurred_at") else None,
        decision=wire.decision_from_pb(event.decision),
    )


@dataclass(slots=True)
class _Cursor:
    """Where a watch stands: the request of its next connection, moved on by each message."""

    request: events_pb2.WatchEventsRequest
    backoff: float = FIRST_BACKOFF

    def take(self, message: events_pb2.WatchEventsResponse) -> EventView | Heartbeat:
        self.backoff = FIRST_BACKOFF
        if message.HasField("event"):
            view: EventView | Heartbeat = event_view(message.event)
            self.request.start_index = message.event.index + 1
        else:
            beat = message.heartbeat
            view = Heartbeat(beat.next_index, from_timestamp(beat.sent_at) if beat.HasField("sent_at") else None)
            self.request.start_index = beat.next_index
        # From the first message on the stream resumes from its own position, never "from now" again.
        self.request.from_now = False
        return view

    def resumable(self, error: grpc.RpcError) -> float | None:
        """The pause before reconnecting after error, None when it is not one to reconnect after."""
        code = error.code() if callable(getattr(error, "code", None)) else None
        if code not in RESUMABLE:
            return None
        pause, self.backoff = self.backoff, min(MOST_BACKOFF, self.backoff * 2)
        return pause


def watch_request(
    *,
    start_index: int = 0,
    from_now: bool = False,
    case_id: str | None = None,
    operation_id: str | None = None,
    action: str | None = None,
    kinds: Iterable[str] = (),
) -> events_pb2.WatchEventsRequest:
    """The WatchEvents request of a watch's arguments (ValueError for a kind not in KINDS)."""
    return events_pb2.WatchEventsRequest(
        start_index=start_index,
        from_now=from_now,
        case_id=case_id or "",
        operation_id=operation_id or "",
        action=action or "",
        kinds=[_kind_to_pb(kind) for kind in kinds],
    )


class EventsClient(Client):
    """Synchronous client of EventService. The stream has no deadline of its own unless one is given:
    heartbeats keep it alive; the client's ``timeout`` does not apply to it."""

    @cached_property
    def _stub(self) -> events_pb2_grpc.EventServiceStub:
        return events_pb2_grpc.EventServiceStub(self._channel)

    def watch(
        self,
        *,
        start_index: int = 0,
        from_now: bool = False,
        case_id: str | None = None,
        operation_id: str | None = None,
        action: str | None = None,
        kinds: Iterable[str] = (),
        heartbeats: bool = False,
        reconnect: bool = True,
        until: float | None = None,
    ) -> Generator[EventView | Heartbeat, None, None]:
        """Yield the matching events from start_index (or from now) on, in index order, following the log;
        heartbeats too when asked. Reconnect from the cursor on UNAVAILABLE unless reconnect is False.
        until: a time on the client's clock at which the stream ends (DeadlineExceeded)."""
        cursor = _Cursor(watch_request(**_filters(start_index, from_now, case_id, operation_id, action, kinds)))
        settings = self._settings
        while True:
            remaining = None if until is None else max(0.0, until - settings.clock())
            stream: Any = self._stub.WatchEvents(cursor.request, timeout=remaining, metadata=settings.metadata)
            try:
                for message in stream:
                    item = cursor.take(message)
                    if heartbeats or isinstance(item, EventView):
                        yield item
                return  # the server ended the stream: it never does while serving
            except grpc.RpcError as error:
                pause = cursor.resumable(error) if reconnect else None
                if pause is None or (until is not None and settings.clock() + pause >= until):
                    raise map_rpc_error(error) from None
                settings.sleep(pause)
            finally:
                stream.cancel()


class AsyncEventsClient(AsyncClient):
    """asyncio client of EventService on a ``grpc.aio`` channel: ``EventsClient``'s watch, awaited."""

    @cached_property
    def _stub(self) -> events_pb2_grpc.EventServiceAsyncStub:
        return events_pb2_grpc.EventServiceStub(self._channel)

    async def watch(
        self,
        *,
        start_index: int = 0,
        from_now: bool = False,
        case_id: str | None = None,
        operation_id: str | None = None,
        action: str | None = None,
        kinds: Iterable[str] = (),
        heartbeats: bool = False,
        reconnect: bool = True,
        until: float | None = None,
    ) -> AsyncGenerator[EventView | Heartbeat, None]:
        """``EventsClient.watch``, as an async iterator."""
        cursor = _Cursor(watch_request(**_filters(start_index, from_now, case_id, operation_id, action, kinds)))
        settings = self._settings
        while True:
            remaining = None if until is None else max(0.0, until - settings.clock())
            stream: Any = self._stub.WatchEvents(
                cursor.request,
                timeout=remaining,
                metadata=settings.metadata,
                wait_for_ready=settings.wait_for_ready,
            )
            try:
                async for message in stream:
                    item = cursor.take(message)
                    if heartbeats or isinstance(item, EventView):
                        yield item
                return
            except grpc.RpcError as error:
                pause = cursor.resumable(error) if reconnect else None
                if pause is None or (until is not None and settings.clock() + pause >= until):
                    raise map_rpc_error(error) from None
                await settings.sleep(pause)
            finally:
                stream.cancel()


def _filters(
    start_index: int,
    from_now: bool,
    case_id: str | None,
    operation_id: str | None,
    action: str | None,
    kinds: Iterable[str],
) -> dict[str, Any]:
    return {
        "start_index": start_index,
        "from_now": from_now,
        "case_id": case_id,
        "operation_id": operation_id,
        "action": action,
        "kinds": tuple(kinds),
    }


__all__ = [
    "KINDS",
    "SETTLED_STATES",
    "AsyncEventsClient",
    "EventView",
    "EventsClient",
    "Heartbeat",
    "WaitTimedOut",
    "event_view",
    "watch_request",
]
