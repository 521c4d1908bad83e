"""The seed's identity story, through a real orchestrator: what changes the operation id, and what a
stale tab can no longer approve."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from decisionflow import reasons
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, review_pb2
from tests.support.stack import T1042_BODY, Stack, approve, policy, start_request


def _replacing(request: review_pb2.StartReviewRequest, current: str) -> review_pb2.StartReviewRequest:
    request.expected_operation_id = current
    return request


def test_seed_identity_story(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    review = stack.review()
    recorded = review.StartReview(start_request(), timeout=10).proposal
    assert recorded.operation_id.startswith("op-v1-") and len(recorded.operation_id) == 70
    assert recorded.evidence_id.startswith("ev-v1-") and recorded.policy_id.startswith("pol-v1-")
    assert [e.source_id for e in recorded.evidence] == ["HOLD-7", "KB-12"]

    # LF or CRLF: the same draft, the same operation (replacing the first draft, which it names).
    crlf_request = start_request(body=T1042_BODY.replace(" please", "\r\nplease"))
    crlf = review.StartReview(_replacing(crlf_request, recorded.operation_id), timeout=10)
    lf = review.StartReview(start_request(body=T1042_BODY.replace(" please", "\nplease")), timeout=10)
    assert crlf.proposal.operation_id == lf.proposal.operation_id != recorded.operation_id
    assert crlf.created and not lf.created

    # One added sentence is a new operation.
    longer = review.StartReview(start_request(case_id="T-2001", body=T1042_BODY + " Sorry for the trouble."))
    base = review.StartReview(_replacing(start_request(case_id="T-2001"), longer.proposal.operation_id))
    assert longer.proposal.operation_id != base.proposal.operation_id

    # Allowance 9 → 10 under the same version label is a new operation.
    richer = review.StartReview(start_request(case_id="T-2002", allowance=10))
    plain = review.StartReview(_replacing(start_request(case_id="T-2002", allowance=9), richer.proposal.operation_id))
    assert richer.proposal.policy_id != plain.proposal.policy_id
    assert richer.proposal.operation_id != plain.proposal.operation_id


def test_hold7_version_change_makes_the_old_tab_stale(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    review = stack.review()
    old = review.StartReview(start_request(case_id="T-1043", hold_version=2), timeout=10).proposal
    edited = review.EditProposal(
        review_pb2.EditProposalRequest(
            expected_operation_id=old.operation_id,
            body=old.body,
            evidence=[
                common_pb2.Evidence(source_id="HOLD-7", version=4, quotation=old.evidence[0].quotation),
                old.evidence[1],
            ],
            policy=policy(),
        ),
        timeout=10,
    ).proposal
    assert edited.body == old.body and edited.evidence[0].quotation == old.evidence[0].quotation
    assert edited.operation_id != old.operation_id
    assert edited.human_edited and edited.parent_operation_id == old.operation_id

    with pytest.raises(grpc.RpcError) as stale:
        review.Approve(approve(old.operation_id), timeout=10)
    assert stale.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    reason, metadata, _ = error_info(stale.value)
    assert reason == reasons.STALE_PROPOSAL
    assert metadata[reasons.CURRENT_OPERATION_ID] == edited.operation_id
    assert stack.decisions() == 0 and stack.effects() == 0
    superseded = review.GetOperation(review_pb2.GetOperationRequest(operation_id=old.operation_id))
    assert superseded.operation.state == common_pb2.OPERATION_STATE_SUPERSEDED

    # A stale edit (the old tab edits again) is refused too; the current proposal is approvable.
    with pytest.raises(grpc.RpcError) as stale_edit:
        review.EditProposal(
            review_pb2.EditProposalRequest(
                expected_operation_id=old.operation_id, body="other", evidence=list(old.evidence), policy=policy()
            )
        )
    assert stale_edit.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    done = review.Approve(approve(edited.operation_id), timeout=10)
    assert done.outcome == common_pb2.OUTCOME_COMMITTED
    assert stack.effects("T-1043") == 1


def test_a_decision_wins_over_staleness(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    review = stack.review()
    first = review.StartReview(start_request(case_id="T-3000"), timeout=10).proposal
    review.Approve(approve(first.operation_id), timeout=10)
    # An edit after the decision starts a new operation and never changes the decided one.
    edited = review.EditProposal(
        review_pb2.EditProposalRequest(
            expected_operation_id=first.operation_id,
            body=first.body + " P.S.",
            evidence=list(first.evidence),
            policy=policy(),
        ),
        timeout=10,
    ).proposal
    retry = review.Approve(approve(first.operation_id), timeout=10)
    assert retry.replay and retry.outcome == common_pb2.OUTCOME_COMMITTED
    assert retry.operation.state == common_pb2.OPERATION_STATE_COMMITTED
    pending = review.GetOperation(review_pb2.GetOperationRequest(operation_id=edited.operation_id))
    assert pending.operation.state == common_pb2.OPERATION_STATE_PENDING_REVIEW
    assert stack.effects("T-3000") == 1
