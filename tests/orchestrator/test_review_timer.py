"""The review timer over real databases (SQLite and PostgreSQL), driven at a clock set past a stage's due
time or a rule's deadline: a due stage is escalated once, with its escalation leaf, and its escalation
groups' votes count from then on; a review past its deadline without a decision expires once, with its
expiry leaf; a review its votes completed, or one under the default rule, is never touched; two runners
at once write each act once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta

import sqlalchemy as sa

from decisionflow.review_rules import ReviewRule, Stage, VoteOutcome, VoteRefusal
from decisionflow.transparency import EscalationLeaf, ExpiryLeaf, VoteLeaf
from decisionflow.vocabulary import Decision, OperationState
from orchestrator.domain import Proposal
from orchestrator.review_timer import TimerRun, act_on_reviews
from orchestrator.schema import escalations
from orchestrator.store import OrchestratorStore
from tests.support.audit import ACTION, T0, audit_store, audited, leaves, proposal, started

__all__ = ["audit_store"]

LEADS = frozenset({"support-leads"})
ON_CALL = frozenset({"on-call-leads"})
FINANCE = frozenset({"finance"})
# Two leads, due after 4 hours and then open to on-call leads too; then one of finance; 72 hours in all.
RULE = ReviewRule(
    ACTION,
    (
        Stage("leads", ("support-leads",), 2, due=timedelta(hours=4), escalate_to=("on-call-leads",)),
        Stage("finance", ("finance",)),
    ),
    deadline=timedelta(hours=72),
)


def _started(store: OrchestratorStore, case_id: str = "T-1", rule: ReviewRule | None = RULE) -> Proposal:
    return started(store, replace(proposal(case_id), rule=rule))


def _escalation_rows(store: OrchestratorStore) -> list[tuple[str, int, datetime]]:
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(escalations).order_by(escalations.c.operation_id, escalations.c.stage_index))
        return [(r.operation_id, r.stage_index, r.escalated_at) for r in rows]


def test_a_due_stage_is_escalated_once_and_its_escalation_groups_count_from_then_on(
    audit_store: OrchestratorStore,
) -> None:
    p = _started(audit_store)
    early = T0 + timedelta(hours=1)
    assert act_on_reviews(audit_store, early, batch=10) == TimerRun(visited=1)
    refused = audit_store.cast_vote(p, "oscar", Decision.APPROVE, ON_CALL, early)
    assert not refused.written and refused.effect.refusal is VoteRefusal.NOT_ELIGIBLE
    assert _escalation_rows(audit_store) == [] and len(leaves(audit_store)) == 1

    due = T0 + timedelta(hours=5)
    run = act_on_reviews(audit_store, due, batch=10)
    assert run == TimerRun(visited=1, escalated=(p.operation_id,), overdue=1, oldest_overdue_seconds=3600.0)
    assert _escalation_rows(audit_store) == [(p.operation_id, 0, due)]
    assert leaves(audit_store)[1:] == [EscalationLeaf(due, p.operation_id, 0, ("on-call-leads",))]
    # Once only: a later run finds it escalated, and still overdue.
    later = act_on_reviews(audit_store, due + timedelta(minutes=1), batch=10)
    assert later == TimerRun(visited=1, overdue=1, oldest_overdue_seconds=3660.0)
    assert len(_escalation_rows(audit_store)) == 1 and len(leaves(audit_store)) == 2

    counted = audit_store.cast_vote(p, "oscar", Decision.APPROVE, ON_CALL, due + timedelta(minutes=2))
    assert counted.written and counted.effect.outcome is VoteOutcome.COUNTS
    assert counted.effect.progress.escalated
    _, progress = audit_store.operation_progress(p.operation_id, due + timedelta(minutes=3))
    assert progress is not None and progress.escalated and progress.approvals == ("oscar",)
    # An auditor reading the leaves admits the escalation, and the vote it made eligible.
    history = audited(audit_store)
    assert history.kinds == {"proposal": 1, "escalation": 1, "vote": 1}
    assert isinstance(leaves(audit_store)[-1], VoteLeaf)


def test_a_review_past_its_deadline_expires_once_with_its_leaf(audit_store: OrchestratorStore) -> None:
    p = _started(audit_store)
    past = T0 + timedelta(hours=73)
    run = act_on_reviews(audit_store, past, batch=10)
    assert run.expired == (p.operation_id,) and run.overdue == 0
    assert audit_store.get_operation(p.operation_id).state is OperationState.EXPIRED
    assert leaves(audit_store)[1:] == [ExpiryLeaf(past, p.operation_id)]
    assert act_on_reviews(audit_store, past + timedelta(hours=1), batch=10) == TimerRun()
    assert len(leaves(audit_store)) == 2
    audited(audit_store)
    late = audit_store.cast_vote(p, "lee", Decision.APPROVE, LEADS, past)
    assert not late.written


def test_reviews_completed_by_their_votes_or_under_the_default_rule_are_left_alone(
    audit_store: OrchestratorStore,
) -> None:
    completed = _started(audit_store, "T-1")
    at = T0 + timedelta(hours=1)
    audit_store.cast_vote(completed, "lee", Decision.APPROVE, LEADS, at)
    audit_store.cast_vote(completed, "lin", Decision.APPROVE, LEADS, at)
    last = audit_store.cast_vote(completed, "fay", Decision.APPROVE, FINANCE, at)
    assert last.effect.outcome is VoteOutcome.COMPLETES
    default = _started(audit_store, "T-2", rule=None)
    written = len(leaves(audit_store))

    run = act_on_reviews(audit_store, T0 + timedelta(days=30), batch=10)
    # The completing vote won: its decision is still to be recorded, and the deadline changes nothing.
    assert run == TimerRun(visited=1)
    assert audit_store.get_operation(completed.operation_id).state is OperationState.PENDING_REVIEW
    assert audit_store.get_operation(default.operation_id).state is OperationState.PENDING_REVIEW
    assert len(leaves(audit_store)) == written


def test_every_open_review_is_reached_page_by_page(audit_store: OrchestratorStore) -> None:
    reviews = [_started(audit_store, f"T-{n}") for n in range(5)]
    run = act_on_reviews(audit_store, T0 + timedelta(hours=5), batch=2)
    assert sorted(run.escalated) == sorted(p.operation_id for p in reviews) and run.visited == 5


def test_two_runners_at_once_write_each_act_once(audit_store: OrchestratorStore) -> None:
    reviews = [_started(audit_store, f"T-{n}") for n in range(4)]
    due = T0 + timedelta(hours=5)
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: act_on_reviews(audit_store, due, batch=10), range(2)))
    assert sorted(op for run in runs for op in run.escalated) == sorted(p.operation_id for p in reviews)
    assert len(_escalation_rows(audit_store)) == 4
    assert [type(leaf).__name__ for leaf in leaves(audit_store)].count("EscalationLeaf") == 4
