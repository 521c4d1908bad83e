"""An Approve whose receiver never answers ends with outcome Unknown before the caller's deadline,
for short and long deadlines alike: the orchestrator keeps back enough time for gRPC's rounding of
the deadline it receives (a 12 s deadline may arrive as 12.1 s) as well as for sending the reply."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import pytest

from decisionflow.faults import FaultPlan
from decisionflow.v1 import common_pb2
from orchestrator.grpc_api import REPLY_MARGIN_SECONDS, reply_margin
from tests.support.stack import Stack, approve, start_request

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
