"""The EventService servicer: proto ↔ the watch use case (orchestrator.events.feed).

Each message is written with ``context.write`` under the stall limit: a caller that takes nothing for
``stall_seconds`` gets UNAVAILABLE, WATCH_FELL_BEHIND naming the first index it may not have received. A
write refused because the caller cancelled ends the call as cancelled (its access line says CANCELLED,
not a server fault).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import grpc

from decisionflow import vocabulary_wire as wire
from decisionflow.v1 import events_pb2, events_pb2_grpc
from decisionflow_server.foundation.errors import FieldViolation, InvalidRequest
from decisionflow_server.runtime.auth import current_principal
from orchestrator.audit_log.feed import Event, EventFilter, EventKind
from orchestrator.errors import WatchFellBehind
from orchestrator.events.feed import Heartbeat, Watching
from orchestrator.validation import check_case_id, check_operation_id
from orchestrator.wire import to_timestamp

Context = grpc.aio.ServicerContext[Any, Any]

# Longest action name a proposal may carry (the proposals table's column).
MAX_ACTION = 64
# An action's name: any a proposal ever carried, supported today or not (record_support_review).
_ACTION = re.compile(rf"\A[A-Za-z0-9._-]{{1,{MAX_ACTION}}}\Z")
KIND_TO_PB: dict[EventKind, events_pb2.EventKind.ValueType] = {
    kind: events_pb2.EventKind.Value("EVENT_KIND_" + kind.name) for kind in EventKind
}
_KIND_FROM_PB = {number: kind for kind, number in KIND_TO_PB.items()}


def filter_from_pb(request: events_pb2.WatchEventsRequest) -> EventFilter:
    """The request's filters, each checked as the other services check it (InvalidRequest naming the field)."""
    kinds: set[EventKind] = set()
    for position, number in enumerate(request.kinds):
        kind = _KIND_FROM_PB.get(number)
        if kind is None:
            raise InvalidRequest([FieldViolation(f"kinds[{position}]", "must be an EVENT_KIND other than UNSPECIFIED")])
        kinds.add(kind)
    if request.action and not _ACTION.match(request.action):
        shape = f"must be 1 to {MAX_ACTION} of letters, digits, '.', '_', '-' (an action's name)"
        raise InvalidRequest([FieldViolation("action", shape)])
    return EventFilter(
        case_id=check_case_id(request.case_id) if request.case_id else None,
        operation_id=check_operation_id(request.operation_id) if request.operation_id else None,
        action=request.action or None,
        kinds=frozenset(kinds),
    )


def event_to_pb(event: Event) -> events_pb2.Event:
    """The wire form of an event."""
    return events_pb2.Event(
        index=event.index,
        leaf=event.data,
        kind=KIND_TO_PB[event.kind],
        case_id=event.case_id,
        operation_id=event.operation_id,
        action=event.action,
        state=wire.state_to_pb(event.state),
        principal=event.principal,
        occurred_at=to_timestamp(event.occurred_at),
        decision=wire.decision_to_pb(event.decision),
    )


def _message(item: Event | Heartbeat) -> tuple[events_pb2.WatchEventsResponse, int]:
    if isinstance(item, Heartbeat):
        beat = events_pb2.Heartbeat(next_index=item.next_index, sent_at=to_timestamp(item.sent_at))
        return events_pb2.WatchEventsResponse(heartbeat=beat), item.next_index
    return events_pb2.WatchEventsResponse(event=event_to_pb(item)), item.index


class EventServicer(events_pb2_grpc.EventServiceServicer):
    """decisionflow.v1.EventService over the process's event feed."""

    def __init__(self, watching: Watching, stall_seconds: float) -> None:
        self._watching = watching
        self._stall = stall_seconds

    async def WatchEvents(self, request: events_pb2.WatchEventsRequest, context: Context) -> None:  # type: ignore[override]
        """Send the events from the cursor on, then follow the log, until the caller cancels."""
        wanted = filter_from_pb(request)
        stream = self._watching.watch(current_principal(), wanted, request.start_index, request.from_now)
        try:
            async for item in stream:
                message, position = _message(item)
                try:
                    # A deadline on the write, not a task per write (asyncio.wait_for's): one write per event.
                    async with asyncio.timeout(self._stall):
                        await context.write(message)
                except TimeoutError:
                    raise WatchFellBehind(position, self._stall) from None
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:  # gRPC refuses a write once the caller has cancelled the call
                    raise asyncio.CancelledError(f"the caller went away: {exc}") from exc
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
