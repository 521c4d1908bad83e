"""With four-eyes on, nobody who wrote any version of a proposal's text may decide it: the original
author stays barred after a colleague edits one character or replaces the proposal through
StartReview, and so does every earlier editor, across any chain of edits and replacements."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from decisionflow import reasons
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, review_pb2
from tests.security.dbstate import snapshot
from tests.support.secure import SecureStack, start_secure_stack
from tests.support.stack import approve, decline, start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


@pytest.fixture
def four_eyes(tmp_path: Path, database_url: str) -> Iterator[SecureStack]:
    """A secure stack whose orchestrator enforces the four-eyes rule, on each kind of database."""
    secure = start_secure_stack(tmp_path, orchestrator_url=database_url, four_eyes=True)
    try:
        yield secure
    finally:
        secure.close()


def _edit(secure: SecureStack, operation_id: str, body: str, editor: str) -> review_pb2.Proposal:
    original = start_request()
    request = review_pb2.EditProposalRequest(
        expected_operation_id=operation_id, body=body, evidence=original.evidence, policy=original.policy
    )
    return secure.stack.review().EditProposal(request, metadata=secure.as_(editor), timeout=15).proposal


def _replace(secure: SecureStack, operation_id: str, body: str, author: str) -> review_pb2.Proposal:
    request = start_request(body=body)
    request.expected_operation_id = operation_id
    return secure.stack.review().StartReview(request, metadata=secure.as_(author), timeout=15).proposal


def _assert_barred(secure: SecureStack, operation_id: str, principal: str) -> None:
    before = (snapshot(secure.stack.orchestrator_url), snapshot(secure.stack.receiver_url))
    for request in (approve(operation_id), decline(operation_id)):
        with pytest.raises(grpc.RpcError) as refused:
            secure.stack.review().Approve(request, metadata=secure.as_(principal), timeout=15)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, refused.value.details()
        reason, metadata, _ = error_info(refused.value)
        assert (reason, metadata.get(reasons.PRINCIPAL)) == (reasons.FOUR_EYES, principal)
    assert (snapshot(secure.stack.orchestrator_url), snapshot(secure.stack.receiver_url)) == before


def test_the_original_author_cannot_approve_after_a_colleague_edits_one_character(four_eyes: SecureStack) -> None:
    started = four_eyes.stack.review().StartReview(start_request(), metadata=four_eyes.as_("sam"), timeout=15)
    body = start_request().body
    edited = _edit(four_eyes, started.proposal.operation_id, body[:-1] + "!", editor="arthur")
    assert (edited.created_by, edited.parent_operation_id) == ("arthur", started.proposal.operation_id)

    _assert_barred(four_eyes, edited.operation_id, "sam")

    answer = four_eyes.stack.review().Approve(approve(edited.operation_id), metadata=four_eyes.as_("rita"), timeout=15)
    assert (answer.outcome, answer.operation.reviewer) == (common_pb2.OUTCOME_COMMITTED, "rita")


def test_every_editor_earlier_in_the_chain_stays_barred(four_eyes: SecureStack) -> None:
    started = four_eyes.stack.review().StartReview(start_request(), metadata=four_eyes.as_("arthur"), timeout=15)
    body = start_request().body
    by_sam = _edit(four_eyes, started.proposal.operation_id, body + " (1)", editor="sam")
    by_arthur = _edit(four_eyes, by_sam.operation_id, body + " (2)", editor="arthur")
    assert by_arthur.created_by == "arthur"

    _assert_barred(four_eyes, by_arthur.operation_id, "sam")

    answer = four_eyes.stack.review().Approve(
        decline(by_arthur.operation_id), metadata=four_eyes.as_("rita"), timeout=15
    )
    assert (answer.outcome, answer.operation.reviewer) == (common_pb2.OUTCOME_DECLINED, "rita")


def test_an_edit_by_the_reviewer_alone_does_not_bar_a_reviewer_outside_the_chain(four_eyes: SecureStack) -> None:
    started = four_eyes.stack.review().StartReview(start_request(), metadata=four_eyes.as_("arthur"), timeout=15)
    edited = _edit(four_eyes, started.proposal.operation_id, start_request().body + " Thanks.", editor="arthur")
    answer = four_eyes.stack.review().Approve(approve(edited.operation_id), metadata=four_eyes.as_("sam"), timeout=15)
    assert (answer.outcome, answer.operation.reviewer) == (common_pb2.OUTCOME_COMMITTED, "sam")


def test_a_colleague_replacing_the_proposal_does_not_let_its_author_approve(four_eyes: SecureStack) -> None:
    # sam starts the case; arthur (an author only) replaces it through StartReview naming sam's proposal.
    started = four_eyes.stack.review().StartReview(start_request(), metadata=four_eyes.as_("sam"), timeout=15)
    op1 = started.proposal.operation_id
    replaced = _replace(four_eyes, op1, start_request().body + " Thank you.", author="arthur")
    assert (replaced.created_by, replaced.parent_operation_id, replaced.human_edited) == ("arthur", op1, False)

    _assert_barred(four_eyes, replaced.operation_id, "sam")

    answer = four_eyes.stack.review().Approve(
        approve(replaced.operation_id), metadata=four_eyes.as_("rita"), timeout=15
    )
    assert (answer.outcome, answer.operation.reviewer) == (common_pb2.OUTCOME_COMMITTED, "rita")


def test_an_author_stays_barred_along_edit_replace_edit(four_eyes: SecureStack) -> None:
    started = four_eyes.stack.review().StartReview(start_request(), metadata=four_eyes.as_("arthur"), timeout=15)
    body = start_request().body
    by_sam = _edit(four_eyes, started.proposal.operation_id, body + " (edited)", editor="sam")
    replaced = _replace(four_eyes, by_sam.operation_id, body + " (replaced)", author="arthur")
    by_arthur = _edit(four_eyes, replaced.operation_id, body + " (replaced, edited)", editor="arthur")
    assert (replaced.parent_operation_id, by_arthur.parent_operation_id) == (by_sam.operation_id, replaced.operation_id)

    _assert_barred(four_eyes, by_arthur.operation_id, "sam")

    answer = four_eyes.stack.review().Approve(
        approve(by_arthur.operation_id), metadata=four_eyes.as_("rita"), timeout=15
    )
    assert (answer.outcome, answer.operation.reviewer) == (common_pb2.OUTCOME_COMMITTED, "rita")
