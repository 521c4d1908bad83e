"""Answering Approve and RedriveOperation before the caller's deadline, even when the work behind
the answer runs late.

After its last Apply attempt the work still has to finish: the workflow run ends, the answer is
recorded, a busy machine schedules it late. The caller must not see DEADLINE_EXCEEDED for that:
once the decision is recorded, "outcome Unknown" (or the outcome already settled) is a true
answer whatever the work still does. So at the reply time the answer is read from the store and
sent, and the work carries on in the background to record what the receiver answered. Before a
decision is recorded there is no such answer, and the call waits for the work as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any

from decisionflow.vocabulary import Decision, OperationId
from decisionflow_server.foundation.errors import DomainError, Unavailable
from orchestrator.domain import DecisionResult, outcome_of
from orchestrator.errors import NotFound
from orchestrator.store import AsyncOrchestratorStore

logger = logging.getLogger("decisionflow.orchestrator")


async def answer_by(
    reply_by: float | None,
    work: Coroutine[Any, Any, DecisionResult],
    early: Callable[[], Awaitable[DecisionResult | None]],
) -> DecisionResult:
    """Return work's result; if reply_by (a time.monotonic() instant) passes first, return early()'s
    answer while work carries on, or keep waiting for work when early() has none.

    Whenever the caller is not handed work's own outcome (an early answer, or the caller gone: its
    deadline passed or it cancelled while this waited), that outcome is still read, and a failure
    logged once, when the work ends: asyncio never reports it as never retrieved."""
    task = asyncio.ensure_future(work)
    handed_over = False
    try:
        if reply_by is not None:
            # asyncio.wait ends the wait, never the work, and leaves its outcome to be read below.
            done, _ = await asyncio.wait({task}, timeout=max(0.0, reply_by - time.monotonic()))
            if not done:
                answer = await early()
                if answer is not None:
                    return answer
        # The caller takes the work's outcome; cancelling the caller here cancels the work too.
        handed_over = True
        return await task
    finally:
        if not handed_over:
            task.add_done_callback(_log_late_failure)


def answer_from_store(
    store: AsyncOrchestratorStore, operation_id: OperationId, decision: Decision, started_at: datetime
) -> Callable[[], Awaitable[DecisionResult | None]]:
    """Return the early answer of a call made at started_at that asked for decision on operation_id:
    the operation as stored once that decision is recorded, else None (no decision yet, a different
    one, which the work itself reports as a conflict, or a store that cannot answer)."""

    async def stored() -> DecisionResult | None:
        try:
            operation = await store.get_operation(operation_id)
        except (NotFound, Unavailable):
            return None
        recorded = operation.decision
        if recorded is None or recorded.decision is not decision:
            return None
        return DecisionResult(operation, outcome_of(operation.state), replay=recorded.decided_at < started_at)

    return stored


def _log_late_failure(task: asyncio.Future[DecisionResult]) -> None:
    # A refusal (a database failing over, say) is an expected state: one line with its reason, no
    # traceback (the store has logged the driver's own text once; a traceback would repeat its SQL).
    # Anything else is a defect and keeps its traceback.
    if task.cancelled():
        return
    error = task.exception()
    if isinstance(error, DomainError):
        logger.warning("work behind a call whose answer was already given failed: %s", error)
    elif error is not None:
        logger.warning("work behind a call whose answer was already given failed: %r", error, exc_info=error)
