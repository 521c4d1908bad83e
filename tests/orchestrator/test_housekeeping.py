"""Operators' housekeeping commands, run as the real console entry point in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from decisionflow import reasons
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, review_pb2
from orchestrator.quotas import AuthorLimits
from orchestrator.workflow import ReviewWorkflow
from tests.security.dbstate import snapshot
from tests.support.stack import CHECKPOINT_KEY, Stack, approve, count, decline, policy, start_request


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    env["DECISIONFLOW_CHECKPOINT_KEYS"] = CHECKPOINT_KEY
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def _run(*args: str) -> dict[str, object]:
    done = _command(*args)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
def test_prune_removes_only_settled_operations_checkpoints(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    review = stack.review()
    settled = review.StartReview(start_request(case_id="T-1"), timeout=10).proposal.operation_id
    pending = review.StartReview(start_request(case_id="T-2"), timeout=10).proposal.operation_id
    review.Approve(approve(settled), timeout=10)
    url = stack.orchestrator_url
    settled_checkpoints = count(url, f"SELECT count(*) FROM checkpoints WHERE operation_id = '{settled}'")
    pending_checkpoints = count(url, f"SELECT count(*) FROM checkpoints WHERE operation_id = '{pending}'")
    assert settled_checkpoints > 0 and pending_checkpoints > 0

    dry = _run("prune-checkpoints", "--database-url", url, "--older-than-days", "0", "--dry-run")
    assert dry["checkpoints"] == settled_checkpoints
    assert count(url, "SELECT count(*) FROM checkpoints") == settled_checkpoints + pending_checkpoints
    kept = _run("prune-checkpoints", "--database-url", url, "--older-than-days", "30")
    assert kept["checkpoints"] == 0
    pruned = _run("prune-checkpoints", "--database-url", url, "--older-than-days", "0")
    assert pruned["checkpoints"] == settled_checkpoints
    assert count(url, f"SELECT count(*) FROM checkpoints WHERE operation_id = '{settled}'") == 0
    assert count(url, f"SELECT count(*) FROM checkpoints WHERE operation_id = '{pending}'") == pending_checkpoints
    # Proposals, decisions and receipts are kept forever; the pending review still resumes.
    assert count(url, f"SELECT count(*) FROM proposals WHERE operation_id = '{settled}'") == 1
    assert count(url, "SELECT count(*) FROM decisions") == 1
    assert count(url, "SELECT count(*) FROM operations WHERE receipt_id IS NOT NULL") == 1
    assert review.Approve(approve(pending), timeout=10).outcome == common_pb2.OUTCOME_COMMITTED


@pytest.mark.slow
def test_a_superseded_proposal_pruned_then_edited_back_is_approved(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    review = stack.review()
    first = review.StartReview(start_request(case_id="T-5"), timeout=10).proposal

    def edit(expected: str, body: str) -> str:
        request = review_pb2.EditProposalRequest(
            expected_operation_id=expected, body=body, evidence=list(first.evidence), policy=policy()
        )
        return review.EditProposal(request, timeout=10).proposal.operation_id

    second = edit(first.operation_id, first.body + " Thanks.")
    url = stack.orchestrator_url
    pruned = _run("prune-checkpoints", "--database-url", url, "--older-than-days", "0")
    assert isinstance(pruned["checkpoints"], int) and pruned["checkpoints"] > 0
    assert count(url, f"SELECT count(*) FROM checkpoints WHERE operation_id = '{first.operation_id}'") == 0
    assert count(url, f"SELECT count(*) FROM checkpoints WHERE operation_id = '{second}'") > 0

    assert edit(second, first.body) == first.operation_id  # the same content: the same operation, current again
    assert review.Approve(approve(first.operation_id), timeout=10).outcome == common_pb2.OUTCOME_COMMITTED
    assert stack.effects("T-5") == 1


@pytest.mark.slow
def test_reopen_after_a_graph_change_keeps_the_operation_id(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(workflow=ReviewWorkflow("audited"))
    op = stack.review().StartReview(start_request(), timeout=10).proposal.operation_id
    decided = stack.review().StartReview(start_request(case_id="T-9"), timeout=10).proposal.operation_id
    stack.review().Approve(approve(decided), timeout=10)
    stack.stop_orchestrator()

    url = stack.orchestrator_url
    old_checkpoint = count(url, "SELECT count(*) FROM pending_reviews WHERE retired_checkpoint_id IS NOT NULL")
    assert old_checkpoint == 0
    listed = _run("reopen-reviews", "--database-url", url, "--dry-run")
    found = listed["found"]
    assert isinstance(found, list) and [r["operation_id"] for r in found] == [op]
    done = _run("reopen-reviews", "--database-url", url)
    assert done["reopened"] == [op]
    assert count(url, "SELECT count(*) FROM pending_reviews WHERE retired_checkpoint_id IS NOT NULL") == 1
    assert _run("reopen-reviews", "--database-url", url)["found"] == []

    stack.start_orchestrator()  # the standard graph
    result = stack.review().Approve(approve(op), timeout=10)
    assert result.outcome == common_pb2.OUTCOME_COMMITTED
    assert result.operation.operation_id == op
    assert stack.effects() == 2


class ServerClock:
    """The orchestrator's wall clock, set by the test: proposals can be made weeks ago."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.mark.slow
def test_expire_reviews_takes_abandoned_reviews_out_of_the_inbox_for_good(
    make_stack: Callable[..., Stack], database_url: str
) -> None:
    clock = ServerClock()
    today = clock.now
    limits = AuthorLimits(calls_per_second=0, call_burst=1, content_bytes_per_minute=0, open_reviews=3)
    stack = make_stack(orchestrator_url=database_url, clock=clock, author_limits=limits)
    review = stack.review()
    clock.now = today - timedelta(days=40)
    abandoned = review.StartReview(start_request(case_id="T-1"), timeout=10).proposal
    settled = review.StartReview(start_request(case_id="T-2"), timeout=10).proposal.operation_id
    assert review.Approve(approve(settled), timeout=10).outcome == common_pb2.OUTCOME_COMMITTED
    clock.now = today - timedelta(days=2)
    recent = review.StartReview(start_request(case_id="T-3"), timeout=10).proposal.operation_id
    recent_too = review.StartReview(start_request(case_id="T-4"), timeout=10).proposal.operation_id
    clock.now = today
    with pytest.raises(grpc.RpcError) as at_cap:
        review.StartReview(start_request(case_id="T-5"), timeout=10)
    assert error_info(at_cap.value)[0] == reasons.TOO_MANY_OPEN_REVIEWS
    url = stack.orchestrator_url

    before = snapshot(url)
    assert _run("expire-reviews", "--database-url", url, "--older-than", "30d", "--dry-run") == {
        "command": "expire-reviews",
        "dry_run": True,
        "reviews": 1,
    }
    assert snapshot(url) == before
    done = _command("expire-reviews", "--database-url", url, "--older-than", "30d")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["reviews"] == 1
    assert "expired 1 undecided reviews whose case has not moved for 30d" in done.stderr

    operation = review.GetOperation(review_pb2.GetOperationRequest(operation_id=abandoned.operation_id), timeout=10)
    assert operation.operation.state == common_pb2.OPERATION_STATE_EXPIRED
    inbox = review.ListPendingReviews(review_pb2.ListPendingReviewsRequest(), timeout=10)
    assert {e.proposal.operation_id for e in inbox.entries} == {recent, recent_too}
    for decision in (approve(abandoned.operation_id), decline(abandoned.operation_id)):
        with pytest.raises(grpc.RpcError) as refused:
            review.Approve(decision, timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.value.details()
        assert error_info(refused.value)[:2] == (
            reasons.REVIEW_EXPIRED,
            {reasons.OPERATION_ID: abandoned.operation_id},
        )
    assert stack.decisions() == 1 and stack.effects("T-1") == 0
    assert _run("expire-reviews", "--database-url", url, "--older-than", "30d")["reviews"] == 0

    # The expired review no longer counts against its author, and an edit asks for a review again.
    assert review.StartReview(start_request(case_id="T-5"), timeout=10).created
    edit = review_pb2.EditProposalRequest(
        expected_operation_id=abandoned.operation_id,
        body=abandoned.body + " Still relevant.",
        evidence=list(abandoned.evidence),
        policy=policy(),
    )
    with pytest.raises(grpc.RpcError) as full:  # T-3, T-4 and T-5 are open: the author is at the cap again
        review.EditProposal(edit, timeout=10)
    assert error_info(full.value)[0] == reasons.TOO_MANY_OPEN_REVIEWS
    assert review.Approve(decline(recent), timeout=10).outcome == common_pb2.OUTCOME_DECLINED
    asked_again = review.EditProposal(edit, timeout=10).proposal
    assert asked_again.parent_operation_id == abandoned.operation_id
    assert review.Approve(approve(asked_again.operation_id), timeout=10).outcome == common_pb2.OUTCOME_COMMITTED
    assert stack.effects("T-1") == 1


def test_expire_reviews_refuses_an_age_it_cannot_read() -> None:
    done = _command("expire-reviews", "--database-url", "sqlite:///nowhere.db", "--older-than", "a month")
    assert done.returncode == 2
    assert "--older-than: expected seconds or a number with s, m, h or d" in done.stderr
