"""``wait_for_outcome`` on the event feed (docs/events.md): the operation, as GetOperation answers it, once it
is settled; the stream only says when to ask again (see ``decisionflow.client.events``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from decisionflow.client.errors import DecisionflowError
from decisionflow.client.events import (
    SETTLED_STATES,
    AsyncEventsClient,
    EventsClient,
    EventView,
    Heartbeat,
    WaitTimedOut,
)
from decisionflow.client.views import OperationView


def _concerns(event: EventView, operation: OperationView) -> bool:
    # The operation's own events, and any proposal of its case (a replacement supersedes it).
    return event.operation_id == operation.operation_id or event.kind == "proposal"


def wait_for_outcome(
    get_operation: Callable[[str], OperationView],
    events: EventsClient,
    operation_id: str,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
) -> OperationView:
    """The operation once settled (see the module docstring); WaitTimedOut after timeout seconds."""
    until = clock() + timeout
    operation = get_operation(operation_id)
    if operation.state in SETTLED_STATES:
        return operation
    stream = events.watch(from_now=True, case_id=operation.case_id, heartbeats=True, until=until)
    opened = False
    try:
        for item in stream:
            if isinstance(item, Heartbeat):
                if opened:
                    continue
                opened = True  # the stream's first message: read the operation again now
            elif not _concerns(item, operation):
                continue
            operation = get_operation(operation_id)
            if operation.state in SETTLED_STATES:
                return operation
    except DecisionflowError as error:
        if clock() < until:
            raise
        raise WaitTimedOut(operation, timeout) from error
    finally:
        stream.close()
    raise WaitTimedOut(operation, timeout)


async def wait_for_outcome_async(
    get_operation: Callable[[str], Any],
    events: AsyncEventsClient,
    operation_id: str,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
) -> OperationView:
    """``wait_for_outcome`` on asyncio clients."""
    until = clock() + timeout
    operation: OperationView = await get_operation(operation_id)
    if operation.state in SETTLED_STATES:
        return operation
    stream = events.watch(from_now=True, case_id=operation.case_id, heartbeats=True, until=until)
    opened = False
    try:
        async for item in stream:
            if isinstance(item, Heartbeat):
                if opened:
                    continue
                opened = True
            elif not _concerns(item, operation):
                continue
            operation = await get_operation(operation_id)
            if operation.state in SETTLED_STATES:
                return operation
    except DecisionflowError as error:
        if clock() < until:
            raise
        raise WaitTimedOut(operation, timeout) from error
    finally:
        await stream.aclose()
    raise WaitTimedOut(operation, timeout)
