"""Work that outlives its caller is still observed: when the caller's deadline passes while the answer
is being read (a database failing over stalls that read), the work carries on, and when it then fails
its failure is logged once, as one line with the reason, never left for asyncio to report as a "Task
exception was never retrieved" with a traceback."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

import pytest

from decisionflow_server.foundation.errors import Unavailable
from orchestrator.domain import DecisionResult
from orchestrator.service._in_time import answer_by

REASON = "orchestrator database unavailable: the database cannot answer: it is unreachable, busy or failing over"


async def _caller_leaves_then_the_work_fails() -> list[dict[str, Any]]:
    """Run answer_by as a gRPC handler would, cancel it as gRPC does at the caller's deadline while the
    early answer is still being read, then let the work fail; return what asyncio reported."""
    reported: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: reported.append(context))
    work_may_fail = asyncio.Event()
    reading = asyncio.Event()

    async def work() -> DecisionResult:
        await work_may_fail.wait()
        raise Unavailable(REASON)

    async def early() -> DecisionResult | None:
        reading.set()
        await asyncio.Event().wait()  # the store's read hangs, as on a host that stopped answering
        return None

    handler = asyncio.ensure_future(answer_by(time.monotonic(), work(), early))
    await reading.wait()
    handler.cancel()  # the caller's deadline passed
    with pytest.raises(asyncio.CancelledError):
        await handler
    work_may_fail.set()
    for _ in range(5):  # the work fails, then its done callbacks run
        await asyncio.sleep(0)
    del handler
    gc.collect()  # a task whose exception nobody read reports it when it is collected
    await asyncio.sleep(0)
    return reported


def test_work_failing_after_the_caller_left_is_logged_once_and_never_unretrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG):
        reported = asyncio.run(_caller_leaves_then_the_work_fails())
    assert [context.get("message") for context in reported] == []
    lines = [record for record in caplog.records if REASON in record.getMessage()]
    assert [(record.levelno, record.exc_info) for record in lines] == [(logging.WARNING, None)], lines
    assert "failed: " + REASON in lines[0].getMessage()
