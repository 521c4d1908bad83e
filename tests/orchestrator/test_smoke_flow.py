"""A first pass through the approve path on a real receiver and orchestrator."""

from __future__ import annotations

from collections.abc import Callable

from decisionflow.v1 import common_pb2, review_pb2
from tests.support.stack import Stack, approve, start_request


def test_start_then_approve_commits_one_effect(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    review = stack.review()
    started = review.StartReview(start_request(), timeout=10)
    assert started.created
    op = started.proposal.operation_id
    again = review.StartReview(start_request(), timeout=10)
    assert not again.created and again.proposal.operation_id == op
    result = review.Approve(approve(op), timeout=10)
    assert result.outcome == common_pb2.OUTCOME_COMMITTED
    assert result.operation.receipt.receipt_id
    replay = review.Approve(approve(op), timeout=10)
    assert replay.replay and replay.outcome == common_pb2.OUTCOME_COMMITTED
    assert replay.operation.receipt.receipt_id == result.operation.receipt.receipt_id
    assert stack.effects("T-1042") == 1
    got = review.GetOperation(review_pb2.GetOperationRequest(operation_id=op), timeout=5)
    assert got.operation.state == common_pb2.OPERATION_STATE_COMMITTED
