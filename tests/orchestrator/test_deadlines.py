"""An Approve whose receiver never answers ends with outcome Unknown before the caller's deadline,
for short and long deadlines alike: the orchestrator keeps back enough time for gRPC's rounding of
the deadline it receives (a 12 s deadline may arrive as 12.1 s) as well as for sending the reply."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from decisionflow.v1 import common_pb2, review_pb2
from decisionflow.vocabulary import EffectRequest, Receipt
from decisionflow_server.runtime.faults import FaultPlan
from orchestrator.effects import ReceiverEffects
from orchestrator.grpc_api import REPLY_MARGIN_SECONDS, reply_margin
from tests.support.stack import Stack, approve, start_request

DOCS = Path(__file__).resolve().parents[2] / "docs"

# Each timeout sits just past a point where gRPC's grpc-timeout encoding changes unit, where it
# rounds up the most (and one minute, which it sends exactly).
TIMEOUTS = (0.5, 1.0, 9.995, 10.001, 12.001, 30.05, 60.0, 100.5, 1000.5, 10_000.5, 100_000.5, 1e7)


async def _deadlines_seen_by_a_server(timeouts: tuple[float, ...]) -> list[float]:
    """Call a real gRPC server once per timeout; return the time remaining the server saw each time."""

    async def report(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return repr(context.time_remaining()).encode()

    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(report)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("deadline.Probe", {"Report": handler})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/deadline.Probe/Report", request_serializer=None, response_deserializer=None)
            return [float(await call(b"", timeout=timeout)) for timeout in timeouts]
    finally:
        await server.stop(0)


def test_the_guides_state_the_margin_the_orchestrator_keeps_back() -> None:
    # reply_margin(remaining) = fixed + 1% of remaining: both guides quote the fixed part in ms.
    fixed_ms = round(reply_margin(0.0) * 1000)
    assert round(reply_margin(100.0) - reply_margin(0.0), 6) == 1.0  # 1% of 100 s
    for page in ("clients.md", "review-protocol.md"):
        text = " ".join((DOCS / page).read_text(encoding="utf-8").split())
        assert re.findall(r"keeps back (\d+) ms plus 1% of the time left", text) == [str(fixed_ms)], page


def test_the_reply_margin_covers_how_grpc_rounds_the_deadline_it_delivers() -> None:
    seen = asyncio.run(_deadlines_seen_by_a_server(TIMEOUTS))
    # gRPC rounds up: past 100 s the server sees a later deadline than the caller set, by more
    # than the fixed reply margin; without the share that turns Unknown into DEADLINE_EXCEEDED.
    late = {timeout: remaining - timeout for timeout, remaining in zip(TIMEOUTS, seen, strict=True)}
    assert late[100.5] > REPLY_MARGIN_SECONDS
    for timeout, remaining in zip(TIMEOUTS, seen, strict=True):
        # The server answers reply_margin before its deadline: still the fixed margin before the caller's.
        assert remaining - reply_margin(remaining) <= timeout - REPLY_MARGIN_SECONDS, (timeout, remaining)


def _approve_with_a_receiver_that_never_answers(make_stack: Callable[..., Stack], timeout: float) -> None:
    # The receiver commits, then holds its answer past the caller's deadline; one receiver attempt
    # may last the whole call, so the call's own deadline is what ends it.
    stack = make_stack(receiver={"faults": FaultPlan(delay=1.0)}, receiver_timeout_seconds=3600.0)
    review = stack.review()
    operation_id = review.StartReview(start_request(), timeout=10).proposal.operation_id
    answer = review.Approve(approve(operation_id), timeout=timeout)
    assert answer.outcome == common_pb2.OUTCOME_UNKNOWN
    assert answer.operation.state == common_pb2.OPERATION_STATE_UNKNOWN
    assert stack.decisions() == 1


def test_a_receiver_that_never_answers_is_unknown_within_a_short_deadline(make_stack: Callable[..., Stack]) -> None:
    # Short, yet long enough for the decision and the resumed workflow on a loaded 2-core machine.
    _approve_with_a_receiver_that_never_answers(make_stack, 2.5)


@pytest.mark.slow
@pytest.mark.parametrize("timeout", [10.05, 12.0])
def test_a_receiver_that_never_answers_is_unknown_within_a_long_deadline(
    make_stack: Callable[..., Stack], timeout: float
) -> None:
    _approve_with_a_receiver_that_never_answers(make_stack, timeout)


class _LateAnswers:
    """The real receiver's Apply, whose answer then reaches the orchestrator only after the
    caller's deadline: the work after the last attempt runs late, as on a saturated machine."""

    def __init__(self, late_by: float) -> None:
        self.late_by = late_by
        self.receiver_target = ""
        self._effects: ReceiverEffects | None = None

    async def apply(self, request: EffectRequest, *, deadline: float | None) -> Receipt:
        if self._effects is None:
            self._effects = ReceiverEffects.connect(self.receiver_target, token=None, timeout=5.0)
        receipt = await self._effects.apply(request, deadline=deadline)
        assert deadline is not None
        await asyncio.sleep(max(0.0, deadline - time.monotonic()) + self.late_by)
        return receipt


def test_work_that_runs_past_the_deadline_still_answers_unknown_in_time(make_stack: Callable[..., Stack]) -> None:
    late = _LateAnswers(late_by=1.5)
    stack = make_stack(effects=late)
    late.receiver_target = f"127.0.0.1:{stack.receiver_port}"
    review = stack.review()
    operation_id = review.StartReview(start_request(), timeout=10).proposal.operation_id

    # Long enough for the decision and the resumed workflow on a loaded 2-core machine (2 s was not, once).
    answer = review.Approve(approve(operation_id), timeout=4.0)

    # Answered in time (an answer at all, not DEADLINE_EXCEEDED, within the call's 4 s, while the work
    # runs 1.5 s past it) from what is recorded: the decision stands, the effect's fate is open.
    assert answer.outcome == common_pb2.OUTCOME_UNKNOWN
    assert answer.operation.state == common_pb2.OPERATION_STATE_UNKNOWN
    assert not answer.replay
    # The work carried on and recorded the receiver's answer once it came.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        state = review.GetOperation(review_pb2.GetOperationRequest(operation_id=operation_id), timeout=5).operation
        if state.state == common_pb2.OPERATION_STATE_COMMITTED:
            break
        time.sleep(0.05)
    assert state.state == common_pb2.OPERATION_STATE_COMMITTED
    assert stack.effects() == 1

    # A replay that runs late too answers in time, and says it is a replay of the recorded decision.
    replayed = review.Approve(approve(operation_id), timeout=2.0)
    assert replayed.outcome == common_pb2.OUTCOME_COMMITTED
    assert replayed.replay
