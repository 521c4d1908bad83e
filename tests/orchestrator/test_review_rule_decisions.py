"""Approve and Decline under a review rule, over real gRPC on SQLite and PostgreSQL: two of three leads,
then one of finance. A vote that counts answers AWAITING_APPROVALS with the review's progress and writes
nothing at the receiver; the vote that completes the last stage writes the one effect; a vote the rule
does not count, or cast past its deadline, is refused with nothing written; a principal's second vote is
a replay; a decline by an eligible reviewer ends the review; and racing last votes end with one decision
and at most one effect."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from decisionflow.bearer import bearer_metadata
from decisionflow.client import ApproveResult, AsyncReviewClient, ReviewClient, ReviewProgress
from decisionflow.identity import EvidenceItem, PolicyRef
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, review_pb2
from decisionflow.vocabulary import Decision, OperationId, OperationState, Outcome, Role
from decisionflow_server.storage import db
from orchestrator.store import OrchestratorStore
from tests.support.rules_desk import TWO_STAGES, Desk, open_desk
from tests.support.stack import approve, count, decline, start_request

PEOPLE = {
    "ava": ([Role.AUTHOR, Role.REVIEWER], ["support-leads"]),
    "lee": ([Role.REVIEWER], ["support-leads"]),
    "lin": ([Role.REVIEWER], ["finance", "support-leads"]),
    "lou": ([Role.REVIEWER], ["support-leads"]),
    "fay": ([Role.REVIEWER], ["finance"]),
    "fin": ([Role.REVIEWER], ["finance"]),
    "oli": ([Role.REVIEWER], []),
}


def refused(desk: Desk, who: str, request: review_pb2.ApproveRequest) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    """The status, reason and metadata of who's refused Approve."""
    with pytest.raises(grpc.RpcError) as failed:
        desk.call(who, "Approve", request)
    reason, metadata, _ = error_info(failed.value)
    return failed.value.code(), reason, metadata


def rows(desk: Desk, table: str) -> int:
    """The rows of table in the desk's orchestrator database."""
    return count(desk.stack.orchestrator_url, f"SELECT count(*) FROM {table}")


@pytest.fixture
def desk(database_url: str, tmp_path: Path) -> Iterator[Desk]:
    """A stack on a fresh orchestrator database of each kind, with the rules file and a token per person."""
    with open_desk(tmp_path, PEOPLE, orchestrator_url=database_url) as opened:
        yield opened


def test_votes_count_stage_by_stage_and_the_last_writes_the_one_effect(desk: Desk) -> None:
    op = desk.start("T-1")
    first = desk.call("lee", "Approve", approve(op))
    assert first.outcome == common_pb2.OUTCOME_AWAITING_APPROVALS and not first.replay
    assert first.operation.state == common_pb2.OPERATION_STATE_PENDING_REVIEW
    progress = first.operation.progress
    assert (progress.stage_index, progress.stage_name, progress.stage_count) == (0, "leads", 2)
    assert (list(progress.approvals_given), progress.approvals_needed) == (["lee"], 2)  # 1 of 2
    assert list(progress.eligible_groups) == ["support-leads"] and not progress.HasField("deadline")

    read = desk.call("oli", "GetOperation", review_pb2.GetOperationRequest(operation_id=op)).operation
    assert read.progress == progress

    second = desk.call("lin", "Approve", approve(op))
    assert second.outcome == common_pb2.OUTCOME_AWAITING_APPROVALS
    assert (second.operation.progress.stage_index, second.operation.progress.stage_name) == (1, "finance")
    assert list(second.operation.progress.approvals_given) == []
    assert desk.stack.effects() == 0 and desk.stack.decisions() == 0

    # lin holds finance too, but counted in the leads' stage: a second vote of lin is a replay.
    again = desk.call("lin", "Approve", approve(op))
    assert again.replay and again.outcome == common_pb2.OUTCOME_AWAITING_APPROVALS
    assert rows(desk, "votes") == 2

    last = desk.call("fay", "Approve", approve(op))
    assert last.outcome == common_pb2.OUTCOME_COMMITTED and not last.replay
    assert last.operation.reviewer == "fay"
    assert desk.stack.effects() == 1 and desk.stack.decisions() == 1
    assert desk.call("fay", "Approve", approve(op)).replay
    assert desk.stack.effects() == 1 and rows(desk, "votes") == 3


def test_votes_the_rule_does_not_count_are_refused_with_nothing_written(desk: Desk) -> None:
    op = desk.start("T-1")
    entries = rows(desk, "audit_entries")
    code, reason, metadata = refused(desk, "fay", approve(op))
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "NOT_ELIGIBLE_TO_DECIDE")
    assert metadata == {"operation_id": op, "principal": "fay", "vote_refusal": "not_eligible"}
    assert refused(desk, "oli", approve(op))[2]["vote_refusal"] == "not_eligible"
    code, reason, _ = refused(desk, "ava", approve(op))
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "FOUR_EYES")
    assert rows(desk, "votes") == 0 and rows(desk, "audit_entries") == entries

    desk.call("lee", "Approve", approve(op))
    code, reason, metadata = refused(desk, "lee", decline(op))
    assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "DECISION_CONFLICT")
    assert rows(desk, "votes") == 1


def test_a_decline_by_an_eligible_reviewer_ends_the_review(desk: Desk) -> None:
    op = desk.start("T-1")
    desk.call("lee", "Approve", approve(op))
    declined = desk.call("lou", "Approve", decline(op))
    assert declined.outcome == common_pb2.OUTCOME_DECLINED
    assert declined.operation.state == common_pb2.OPERATION_STATE_DECLINED
    assert desk.stack.effects() == 0 and desk.stack.decisions() == 1
    code, reason, _ = refused(desk, "lin", approve(op))
    assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "DECISION_CONFLICT")


def test_a_decided_review_says_who_approved_and_declined_at_each_stage(desk: Desk) -> None:
    op = desk.start("T-1")
    desk.call("lee", "Approve", approve(op))
    desk.call("lin", "Approve", approve(op))
    assert desk.call("fay", "Approve", decline(op)).outcome == common_pb2.OUTCOME_DECLINED
    with grpc.insecure_channel(f"127.0.0.1:{desk.stack.orchestrator_port}") as channel:
        record = ReviewClient(channel, metadata=bearer_metadata(desk.tokens["oli"])).get_proposal(operation_id=op)
    assert record.operation.state is OperationState.DECLINED
    progress = record.operation.progress
    assert progress is not None and (progress.stage_index, progress.stage_name) == (1, "finance")
    leads, finance = progress.stages
    assert [
        (s.stage_name, s.approvals_given, s.approvals_needed, s.declines, s.declines_to_end) for s in (leads, finance)
    ] == [
        ("leads", ("lee", "lin"), 2, (), 1),
        ("finance", (), 1, ("fay",), 1),
    ]
    assert leads.ended_at is not None and finance.started_at == leads.ended_at  # lin's approval began finance
    assert finance.ended_at is not None and finance.ended_at >= finance.started_at
    assert leads.due_time is None and leads.escalated_at is None and finance.escalated_at is None


@pytest.mark.parametrize("rival", [approve, decline], ids=["approval", "decline"])
def test_racing_last_votes_end_with_one_decision(desk: Desk, rival: object) -> None:
    rounds = 30
    for round_ in range(rounds):
        op = desk.start(f"T-{round_}")
        desk.call("lee", "Approve", approve(op))
        desk.call("lou", "Approve", approve(op))

        def vote(who: str, op: str = op) -> tuple[str, object]:
            request = approve(op) if who == "fay" else rival(op)  # type: ignore[operator]
            try:
                return "answer", desk.call(who, "Approve", request)
            except grpc.RpcError as refused:
                return "refused", error_info(refused)[0]

        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(vote, ["fay", "fin"]))
        outcomes = sorted(
            common_pb2.Outcome.Name(a.outcome) if kind == "answer" else str(a)  # type: ignore[attr-defined]
            for kind, a in answers
        )
        if rival is approve:
            assert outcomes == ["OUTCOME_COMMITTED", "OUTCOME_COMMITTED"]
            assert sum(a.replay for _, a in answers) == 1  # type: ignore[attr-defined]
        else:
            assert outcomes in (["DECISION_CONFLICT", "OUTCOME_COMMITTED"], ["DECISION_CONFLICT", "OUTCOME_DECLINED"])
    assert desk.stack.decisions() == rounds
    expected = (
        rounds
        if rival is approve
        else count(desk.stack.orchestrator_url, "SELECT count(*) FROM decisions WHERE decision = 'approve'")
    )
    assert desk.stack.effects() == expected


def test_the_python_clients_expose_the_outcome_and_the_progress(desk: Desk) -> None:
    op = desk.start("T-1")
    port = desk.stack.orchestrator_port
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        result = ReviewClient(channel, metadata=bearer_metadata(desk.tokens["lee"])).approve(op)
    assert (result.outcome, result.replay) == (Outcome.AWAITING_APPROVALS, False)
    assert result.operation.state is OperationState.PENDING_REVIEW
    progress = result.operation.progress
    assert progress is not None
    assert replace(progress, stages=()) == ReviewProgress(
        0, "leads", 2, ("lee",), 2, ("support-leads",), due_time=None, escalated=False, deadline=None
    )
    [leads] = progress.stages
    assert (leads.stage_index, leads.stage_name, leads.approvals_given, leads.approvals_needed) == (
        0,
        "leads",
        ("lee",),
        2,
    )
    assert leads.started_at is not None and leads.ended_at is None

    async def approve_async() -> ApproveResult:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            return await AsyncReviewClient(channel, metadata=bearer_metadata(desk.tokens["lee"])).approve(op)

    replayed = asyncio.run(approve_async())
    assert (replayed.outcome, replayed.replay) == (Outcome.AWAITING_APPROVALS, True)
    assert replayed.operation.progress == result.operation.progress


def test_a_vote_past_the_rule_s_deadline_is_refused_with_nothing_written(database_url: str, tmp_path: Path) -> None:
    now = [datetime(2026, 12, 21, 9, 0, tzinfo=UTC)]
    within_an_hour = TWO_STAGES.replace(
        "version = 1\n", 'version = 1\n\n[actions.record_support_review]\ndeadline = "1h"\n'
    )
    with open_desk(tmp_path, PEOPLE, within_an_hour, orchestrator_url=database_url, clock=lambda: now[0]) as desk:
        op = desk.start("T-1")
        first = desk.call("lee", "Approve", approve(op))
        assert first.operation.progress.deadline.ToDatetime(UTC) == now[0] + timedelta(hours=1)
        now[0] += timedelta(hours=2)
        code, reason, _ = refused(desk, "lin", approve(op))
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "REVIEW_EXPIRED")
        assert rows(desk, "votes") == 1 and desk.stack.effects() == 0


def test_a_review_whose_votes_ended_it_without_a_decision_is_driven_on_by_a_replay(desk: Desk) -> None:
    # The completing vote was recorded, then its process ended before the decision: the voter's retry drives it.
    op = desk.start("T-1")
    engine = db.create_engine(desk.stack.orchestrator_url)
    try:
        store = OrchestratorStore(engine)
        proposal = store.get_proposal(OperationId(op))
        at = datetime.now(UTC)
        for who, groups in [("lee", {"support-leads"}), ("lou", {"support-leads"}), ("fay", {"finance"})]:
            assert store.cast_vote(proposal, who, Decision.APPROVE, frozenset(groups), at).written
    finally:
        engine.dispose()
    assert desk.stack.decisions() == 0
    code, reason, _ = refused(desk, "fay", decline(op))
    assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "DECISION_CONFLICT")
    retried = desk.call("fay", "Approve", approve(op))
    assert retried.outcome == common_pb2.OUTCOME_COMMITTED and retried.operation.reviewer == "fay"
    assert desk.stack.decisions() == 1 and desk.stack.effects() == 1


def test_start_review_answers_where_the_review_stands(desk: Desk) -> None:
    request = start_request("T-7")
    opened = desk.call("ava", "StartReview", request)
    assert opened.created
    progress = opened.pending_review.progress
    assert (progress.stage_index, progress.stage_name, progress.stage_count) == (0, "leads", 2)
    assert (list(progress.approvals_given), progress.approvals_needed) == ([], 2)
    assert list(progress.eligible_groups) == ["support-leads"]
    op = opened.proposal.operation_id
    desk.call("lee", "Approve", approve(op))
    # The same content again answers the review as it stands now, read from the store.
    again = desk.call("ava", "StartReview", request)
    assert not again.created and list(again.pending_review.progress.approvals_given) == ["lee"]
    # The Python client carries it too.
    evidence = [EvidenceItem(e.source_id, e.version, e.quotation) for e in request.evidence]
    policy = PolicyRef(request.policy.name, request.policy.version_label, request.policy.allowance_units, {})
    with grpc.insecure_channel(f"127.0.0.1:{desk.stack.orchestrator_port}") as channel:
        client = ReviewClient(channel, metadata=bearer_metadata(desk.tokens["ava"]))
        started = client.start_review(request.case_id, request.action, request.body, evidence, policy)
    assert not started.created and started.pending_review.progress is not None
    assert started.pending_review.progress.approvals_given == ("lee",)
