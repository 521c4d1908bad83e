"""The receiver commits and the reply is lost: the caller hears Unknown, never success or failure."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from decisionflow.v1 import common_pb2, effect_receiver_pb2, review_pb2
from tests.support.stack import Stack, approve, start_request


def test_lost_reply_is_unknown_then_a_retry_settles_it_as_replay(
    make_stack: Callable[..., Stack], caplog: pytest.LogCaptureFixture
) -> None:
    # Every Apply commits and then loses its reply, so the orchestrator's own retries all hear
    # UNAVAILABLE; the deadline ends them and the outcome must be Unknown.
    stack = make_stack(receiver_failpoints="receiver.commit_then_lose_reply=raise", receiver_timeout_seconds=1.0)
    review = stack.review()
    op = review.StartReview(start_request(), timeout=10).proposal.operation_id
    with caplog.at_level(logging.INFO, logger="decisionflow.orchestrator"):
        first = review.Approve(approve(op), timeout=10)
    assert first.outcome == common_pb2.OUTCOME_UNKNOWN and not first.replay
    # The receiver accepted the Apply (it committed): a warning that the outcome is unknown, never
    # the error an operator gets when the receiver refuses the orchestrator itself.
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "decisionflow.orchestrator"]
    assert [message.split(":")[0] for level, message in said if level >= logging.WARNING] == [
        "effect outcome unknown"
    ], said
    assert first.operation.state == common_pb2.OPERATION_STATE_UNKNOWN
    assert first.operation.attempts >= 1
    assert stack.effects("T-1042") == 1  # the receiver did commit

    lookup = stack.receiver().Lookup(effect_receiver_pb2.LookupRequest(operation_id=op), timeout=5)
    assert lookup.result.status == common_pb2.LOOKUP_STATUS_APPLIED

    # Same receiver, now with replies delivered: a retry of the approval is a replay that settles it.
    stack.stop_orchestrator()
    stack.start_receiver()
    stack.start_orchestrator()
    review = stack.review()
    again = review.Approve(approve(op), timeout=10)
    assert again.replay and again.outcome == common_pb2.OUTCOME_COMMITTED
    assert again.operation.receipt.receipt_id == lookup.result.receipt.receipt_id
    assert stack.effects("T-1042") == 1
    final = review.GetOperation(review_pb2.GetOperationRequest(operation_id=op), timeout=5).operation
    assert final.state == common_pb2.OPERATION_STATE_COMMITTED


def test_a_single_lost_reply_is_recovered_by_the_orchestrators_own_retry(make_stack: Callable[..., Stack]) -> None:
    # docs/clients.md, "Rehearsing a lost reply": with raise@1 the caller sees COMMITTED at once.
    stack = make_stack(receiver_failpoints="receiver.commit_then_lose_reply=raise@1")
    review = stack.review()
    op = review.StartReview(start_request(), timeout=10).proposal.operation_id
    answer = review.Approve(approve(op), timeout=10)
    assert answer.outcome == common_pb2.OUTCOME_COMMITTED and not answer.replay
    assert answer.operation.attempts == 1  # one attempt, its Apply retried inside it
    assert stack.effects("T-1042") == 1
