"""Operators' housekeeping commands, run as the real console entry point in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from decisionflow.v1 import common_pb2, review_pb2
from orchestrator.workflow import ReviewWorkflow
from tests.support.stack import CHECKPOINT_KEY, Stack, approve, count, policy, start_request


def _run(*args: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    env["DECISIONFLOW_CHECKPOINT_KEYS"] = CHECKPOINT_KEY
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
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
