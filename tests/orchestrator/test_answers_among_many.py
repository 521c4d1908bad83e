"""Each Approve and Decline answers its own operation, read back as stored, among many decided ones."""

from __future__ import annotations

from collections.abc import Callable

from decisionflow.v1 import common_pb2, review_pb2
from tests.support.stack import Stack, approve, decline, start_request


def test_each_answer_is_the_operation_as_stored(make_stack: Callable[..., Stack], database_url: str) -> None:
    stack = make_stack(orchestrator_url=database_url)
    review = stack.review()
    started = [review.StartReview(start_request(case_id=f"T-{3000 + n}"), timeout=10).proposal for n in range(8)]
    # The first decision ever recorded is a decline: an answer read from the wrong row would carry it.
    for n, proposal in enumerate(started):
        request = decline(proposal.operation_id) if n % 3 == 0 else approve(proposal.operation_id)
        answer = review.Approve(request, timeout=30)
        stored = review.GetOperation(review_pb2.GetOperationRequest(operation_id=proposal.operation_id), timeout=10)
        assert answer.operation == stored.operation
        assert (answer.operation.operation_id, answer.operation.case_id) == (proposal.operation_id, proposal.case_id)
        assert answer.operation.decision == request.decision
        expected = common_pb2.OUTCOME_DECLINED if n % 3 == 0 else common_pb2.OUTCOME_COMMITTED
        assert answer.outcome == expected
    assert stack.effects() == 5 and stack.decisions() == 8
