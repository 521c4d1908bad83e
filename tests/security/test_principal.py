"""The reviewer recorded on a decision is the authenticated principal, and the four-eyes rule
keeps an author from deciding their own proposal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from decisionflow import reasons
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, effect_receiver_pb2, review_pb2
from decisionflow_server.runtime.auth import CredentialsError, Role, bearer_metadata, issue_token
from tests.security.dbstate import snapshot
from tests.support.secure import SecureStack, start_secure_stack
from tests.support.stack import approve, count, start_request


@pytest.fixture
def four_eyes_stack(tmp_path: Path) -> Iterator[SecureStack]:
    """A secure stack whose orchestrator enforces the four-eyes rule."""
    secure = start_secure_stack(tmp_path, four_eyes=True)
    try:
        yield secure
    finally:
        secure.close()


def test_approve_request_has_no_field_that_could_name_the_reviewer() -> None:
    assert {field.name for field in review_pb2.ApproveRequest.DESCRIPTOR.fields} == {"operation_id", "decision"}


def test_the_recorded_reviewer_is_the_authenticated_principal(secure_stack: SecureStack) -> None:
    review = secure_stack.stack.review()
    started = review.StartReview(start_request(), metadata=secure_stack.as_("arthur"), timeout=15)
    operation_id = started.proposal.operation_id
    assert started.proposal.created_by == "arthur"
    # An unknown field claiming another reviewer, and a header claiming one, change nothing.
    forged = approve(operation_id).SerializeToString() + b"\x1a\x07mallory"  # field 3, a string
    metadata = (*secure_stack.as_("rita"), ("x-reviewer", "mallory"), ("x-principal", "mallory"))
    approve_call = secure_stack.channel(receiver=False).unary_unary(
        "/decisionflow.v1.ReviewService/Approve",
        request_serializer=None,
        response_deserializer=review_pb2.ApproveResponse.FromString,
    )
    answer = approve_call(forged, metadata=metadata, timeout=15)
    assert answer.outcome == common_pb2.OUTCOME_COMMITTED
    assert answer.operation.reviewer == "rita"

    found = review.GetOperation(
        review_pb2.GetOperationRequest(operation_id=operation_id), metadata=secure_stack.as_("olga"), timeout=10
    )
    assert found.operation.reviewer == "rita"
    assert found.operation.decision == common_pb2.DECISION_APPROVE
    # The business record at the receiver names the same principal.
    effects = secure_stack.stack.receiver().ListEffects(
        effect_receiver_pb2.ListEffectsRequest(case_id="T-1042"), metadata=secure_stack.as_("edna"), timeout=10
    )
    assert [(e.operation_id, e.reviewer) for e in effects.effects] == [(operation_id, "rita")]


def test_four_eyes_author_cannot_decide_own_proposal_another_reviewer_can(four_eyes_stack: SecureStack) -> None:
    secure = four_eyes_stack
    review = secure.stack.review()
    # sam holds both roles: allowed to author, allowed to review, but not the same proposal.
    started = review.StartReview(start_request(), metadata=secure.as_("sam"), timeout=15)
    operation_id = started.proposal.operation_id
    before = (snapshot(secure.stack.orchestrator_url), snapshot(secure.stack.receiver_url))
    for decision in (common_pb2.DECISION_APPROVE, common_pb2.DECISION_DECLINE):
        with pytest.raises(grpc.RpcError) as refused:
            review.Approve(
                review_pb2.ApproveRequest(operation_id=operation_id, decision=decision),
                metadata=secure.as_("sam"),
                timeout=15,
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        reason, metadata, _ = error_info(refused.value)
        assert (reason, metadata.get("principal")) == (reasons.FOUR_EYES, "sam")
    assert (snapshot(secure.stack.orchestrator_url), snapshot(secure.stack.receiver_url)) == before

    answer = review.Approve(approve(operation_id), metadata=secure.as_("rita"), timeout=15)
    assert answer.outcome == common_pb2.OUTCOME_COMMITTED
    assert answer.operation.reviewer == "rita"
    assert count(secure.stack.receiver_url, "SELECT count(*) FROM effects") == 1


def test_four_eyes_off_lets_an_author_with_the_reviewer_role_decide(secure_stack: SecureStack) -> None:
    review = secure_stack.stack.review()
    started = review.StartReview(start_request(), metadata=secure_stack.as_("sam"), timeout=15)
    answer = review.Approve(approve(started.proposal.operation_id), metadata=secure_stack.as_("sam"), timeout=15)
    assert (answer.outcome, answer.operation.reviewer) == (common_pb2.OUTCOME_COMMITTED, "sam")


def test_every_principal_name_the_credentials_admit_can_be_recorded(tmp_path: Path, database_url: str) -> None:
    credentials = tmp_path / "credentials.json"
    with pytest.raises(CredentialsError, match="longer than 128"):
        issue_token(credentials, "a" * 129, [Role.AUTHOR])
    longest = "a" * 128  # as long as a name may be: it must fit wherever the orchestrator records it
    token = issue_token(credentials, longest, [Role.AUTHOR, Role.REVIEWER])
    secure = start_secure_stack(tmp_path, orchestrator_url=database_url)
    try:
        review = secure.stack.review()
        started = review.StartReview(start_request(), metadata=bearer_metadata(token), timeout=15)
        assert started.proposal.created_by == longest
        answer = review.Approve(approve(started.proposal.operation_id), metadata=bearer_metadata(token), timeout=15)
        assert (answer.outcome, answer.operation.reviewer) == (common_pb2.OUTCOME_COMMITTED, longest)
    finally:
        secure.close()
