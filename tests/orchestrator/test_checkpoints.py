"""Checkpoints are verified before they are decoded; graph changes and failed saves are refused."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa

from decisionflow import reasons
from decisionflow.status_details import error_info
from decisionflow.v1 import review_pb2, review_pb2_grpc
from decisionflow_server.storage import db
from orchestrator.workflow import ReviewWorkflow
from tests.support.stack import CHECKPOINT_KEY, Stack, approve, count, start_request


class _Sentinel:
    """Unpickling this creates a file: proof that code ran during decoding."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, int]]:
        return (os.open, (self.path, os.O_CREAT | os.O_WRONLY))


def _execute(url: str, statement: str, **params: object) -> None:
    engine = db.create_engine(url, pool_size=1)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement), params)
    finally:
        engine.dispose()


def _refusal(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    return refused.value


def test_altered_checkpoint_is_refused_and_never_unpickled(make_stack: Callable[..., Stack], tmp_path: Path) -> None:
    stack = make_stack()
    review = stack.review()
    started = review.StartReview(start_request(), timeout=10)
    sentinel = tmp_path / "sentinel"
    malicious = pickle.dumps(_Sentinel(str(sentinel)))
    _execute(
        stack.orchestrator_url,
        "UPDATE checkpoints SET state = :state WHERE checkpoint_id = :cp",
        state=malicious,
        cp=started.pending_review.checkpoint_id,
    )
    refused = _refusal(lambda: review.Approve(approve(started.proposal.operation_id), timeout=10))
    assert refused.code() == grpc.StatusCode.DATA_LOSS
    assert error_info(refused)[:2] == (
        reasons.CHECKPOINT_INTEGRITY,
        {
            reasons.OPERATION_ID: started.proposal.operation_id,
            reasons.CHECKPOINT_ID: started.pending_review.checkpoint_id,
        },
    )
    assert not sentinel.exists()
    assert stack.decisions() == 0 and stack.effects() == 0


def test_checkpoint_of_another_operation_is_refused(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    review = stack.review()
    mine = review.StartReview(start_request(case_id="T-1"), timeout=10)
    theirs = review.StartReview(start_request(case_id="T-2"), timeout=10)
    _execute(
        stack.orchestrator_url,
        "UPDATE pending_reviews SET checkpoint_id = :cp WHERE operation_id = :op",
        cp=theirs.pending_review.checkpoint_id,
        op=mine.proposal.operation_id,
    )
    refused = _refusal(lambda: review.Approve(approve(mine.proposal.operation_id), timeout=10))
    assert refused.code() == grpc.StatusCode.DATA_LOSS
    assert stack.decisions() == 0


def test_checkpoint_sealed_with_an_unknown_key_is_refused_and_rotation_keeps_old_keys(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack()
    first = stack.review().StartReview(start_request(case_id="T-1"), timeout=10).proposal.operation_id
    second = stack.review().StartReview(start_request(case_id="T-2"), timeout=10).proposal.operation_id
    new_key = b"n" * 32
    stack.stop_orchestrator()
    stack.start_orchestrator(checkpoint_keys=(new_key,))
    refused = _refusal(lambda: stack.review().Approve(approve(first), timeout=10))
    assert refused.code() == grpc.StatusCode.DATA_LOSS
    # Rotation: the new key seals, the old one still verifies what it sealed.
    stack.stop_orchestrator()
    stack.start_orchestrator(checkpoint_keys=(new_key, CHECKPOINT_KEY.encode()))
    assert stack.review().Approve(approve(second), timeout=10).operation.receipt.receipt_id
    assert stack.effects() == 1


def test_changed_workflow_graph_is_refused(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    op = stack.review().StartReview(start_request(), timeout=10).proposal.operation_id
    stack.stop_orchestrator()
    stack.start_orchestrator(workflow=ReviewWorkflow("audited"))
    refused = _refusal(lambda: stack.review().Approve(approve(op), timeout=10))
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(refused)[0] == reasons.WORKFLOW_VERSION_MISMATCH
    assert stack.decisions() == 0 and stack.effects() == 0


def test_failed_checkpoint_save_fails_the_request_and_records_nothing(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(failpoints="orchestrator.checkpoint_save=raise")
    refused = _refusal(lambda: stack.review().StartReview(start_request(), timeout=10))
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert error_info(refused)[0] == reasons.CHECKPOINT_SAVE_FAILED
    for table in ("proposals", "operations", "pending_reviews", "checkpoints", "cases"):
        assert count(stack.orchestrator_url, f"SELECT count(*) FROM {table}") == 0, table

    stack.stop_orchestrator()
    stack.start_orchestrator()
    op = stack.review().StartReview(start_request(), timeout=10).proposal.operation_id
    checkpoints_before = count(stack.orchestrator_url, "SELECT count(*) FROM checkpoints")
    stack.stop_orchestrator()
    stack.start_orchestrator(failpoints="orchestrator.checkpoint_save=raise")
    refused = _refusal(lambda: stack.review().Approve(approve(op), timeout=10))
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert stack.decisions() == 0 and stack.effects() == 0
    assert count(stack.orchestrator_url, "SELECT count(*) FROM checkpoints") == checkpoints_before
    state = stack.review().GetOperation(review_pb2.GetOperationRequest(operation_id=op), timeout=5)
    assert state.operation.state == 1  # still PENDING_REVIEW


def test_a_review_writes_the_one_checkpoint_it_resumes_from_and_its_approval_writes_none(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack()
    started = stack.review().StartReview(start_request(), timeout=10)
    op, resumes_from = started.proposal.operation_id, started.pending_review.checkpoint_id

    def stored() -> list[str]:
        engine = db.create_engine(stack.orchestrator_url, pool_size=1)
        try:
            with engine.connect() as conn:
                query = sa.text("SELECT checkpoint_id FROM checkpoints WHERE operation_id = :op")
                return [row[0] for row in conn.execute(query, {"op": op})]
        finally:
            engine.dispose()

    assert stored() == [resumes_from]
    stack.review().Approve(approve(op), timeout=10)
    assert stored() == [resumes_from]
    assert stack.decisions() == 1 and stack.effects() == 1


_ORCHESTRATOR_TABLES = (
    "cases",
    "proposals",
    "pending_reviews",
    "decisions",
    "operations",
    "checkpoints",
    "audit_entries",
)


def _recorded(stack: Stack) -> dict[str, int]:
    rows = {table: count(stack.orchestrator_url, f"SELECT count(*) FROM {table}") for table in _ORCHESTRATOR_TABLES}
    return {**rows, "effects": stack.effects()}


@pytest.mark.parametrize("rpc", ["StartReview", "EditProposal", "Approve"])
def test_a_checkpoint_save_failed_refusal_recorded_nothing_wherever_the_save_failed(
    make_stack: Callable[..., Stack], rpc: str
) -> None:
    """CHECKPOINT_SAVE_FAILED is definite: whichever of a call's checkpoint saves fails (the first, the second, …),
    the call is either refused so with no row and no audit leaf written, or (a save after the commit step)
    answered as if nothing failed; never refused after recording something."""
    stack = make_stack()
    first = stack.review().StartReview(start_request(case_id="T-0"), timeout=10).proposal.operation_id
    original = start_request(case_id="T-0")
    calls: dict[str, Callable[[review_pb2_grpc.ReviewServiceStub, int], object]] = {
        "StartReview": lambda review, n: review.StartReview(start_request(case_id=f"T-{n}"), timeout=10),
        "EditProposal": lambda review, n: review.EditProposal(
            review_pb2.EditProposalRequest(
                expected_operation_id=first, body=f"edit {n}", evidence=original.evidence, policy=original.policy
            ),
            timeout=10,
        ),
        "Approve": lambda review, n: review.Approve(approve(first), timeout=10),
    }
    refused_at = []
    for nth in range(1, 5):
        stack.stop_orchestrator()
        stack.start_orchestrator(failpoints=f"orchestrator.checkpoint_save=raise@{nth}")
        before = _recorded(stack)
        try:
            calls[rpc](stack.review(), nth)
        except grpc.RpcError as refused:
            assert refused.code() == grpc.StatusCode.UNAVAILABLE
            assert error_info(refused)[0] == reasons.CHECKPOINT_SAVE_FAILED
            assert _recorded(stack) == before, f"save {nth} of {rpc} failed"
            refused_at.append(nth)
            continue
        break  # answered: this save, if the call made one, came after everything was recorded
    assert refused_at, f"no failed save refused {rpc}"
