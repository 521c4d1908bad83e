"""Store contract for votes under a review rule, on SQLite and PostgreSQL: each vote is decided against the
votes recorded before it and written with its audit leaf, or refused with nothing written; a principal's
second vote is told apart; concurrent last votes are decided one at a time, so exactly one completes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta

import sqlalchemy as sa

from decisionflow.review_rules import ReviewRule, Stage, VoteOutcome, VoteRefusal
from decisionflow.transparency import VoteLeaf, encode_leaf
from decisionflow.vocabulary import Decision
from orchestrator.domain import Proposal
from orchestrator.schema import votes
from orchestrator.store import OrchestratorStore, VoteAlreadyCast
from tests.support.audit import ACTION, T0, audit_store, audited, leaves, proposal, started

__all__ = ["audit_store"]

LEADS = frozenset({"support-leads"})
FINANCE = frozenset({"finance"})
# Two of three leads, then one of finance.
RULE = ReviewRule(ACTION, (Stage("leads", ("support-leads",), 2), Stage("finance", ("finance",))))


def _started(store: OrchestratorStore, case_id: str = "T-1", rule: ReviewRule = RULE) -> Proposal:
    return started(store, replace(proposal(case_id), rule=rule))


def _vote_rows(store: OrchestratorStore) -> list[tuple[str, str, str, int]]:
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(votes).order_by(votes.c.vote_id))
        return [(r.principal, r.decision, r.groups, r.stage_index) for r in rows]


def test_votes_count_advance_and_complete_each_with_its_leaf(audit_store: OrchestratorStore) -> None:
    p = _started(audit_store)
    at = T0 + timedelta(minutes=1)
    first = audit_store.cast_vote(p, "lee", Decision.APPROVE, LEADS, at)
    assert first.written and first.effect.outcome is VoteOutcome.COUNTS
    assert first.effect.progress.current.approvals == ("lee",)
    second = audit_store.cast_vote(p, "lin", Decision.APPROVE, LEADS | FINANCE, at)
    assert second.effect.outcome is VoteOutcome.ADVANCES and second.effect.progress.current.index == 1
    third = audit_store.cast_vote(p, "fay", Decision.APPROVE, FINANCE, at)
    assert third.effect.outcome is VoteOutcome.COMPLETES
    assert _vote_rows(audit_store) == [
        ("lee", "approve", "support-leads", 0),
        ("lin", "approve", "finance,support-leads", 0),
        ("fay", "approve", "finance", 1),
    ]
    assert [v.principal for v in audit_store.votes(p.operation_id)] == ["lee", "lin", "fay"]
    assert leaves(audit_store)[1:] == [
        VoteLeaf(at, p.operation_id, "APPROVE", "lee", 0, ("support-leads",)),
        VoteLeaf(at, p.operation_id, "APPROVE", "lin", 0, ("finance", "support-leads")),
        VoteLeaf(at, p.operation_id, "APPROVE", "fay", 1, ("finance",)),
    ]
    # An auditor reading the leaves accepts them as the rule the proposal leaf carries.
    assert len(audited(audit_store).operations[p.operation_id].votes) == 3


def test_a_refused_vote_writes_nothing(audit_store: OrchestratorStore) -> None:
    p = _started(audit_store)
    for principal, groups, refusal in [
        ("fay", FINANCE, VoteRefusal.NOT_ELIGIBLE),
        (p.created_by, LEADS, VoteRefusal.AUTHOR),
    ]:
        cast = audit_store.cast_vote(p, principal, Decision.APPROVE, groups, T0)
        assert not cast.written and cast.effect.refusal is refusal
    assert _vote_rows(audit_store) == [] and len(leaves(audit_store)) == 1


def test_one_principal_cannot_count_in_two_stages(audit_store: OrchestratorStore) -> None:
    p = _started(audit_store)
    audit_store.cast_vote(p, "lee", Decision.APPROVE, LEADS, T0)
    audit_store.cast_vote(p, "lin", Decision.APPROVE, LEADS | FINANCE, T0)
    # lin approved the leads' stage; a second vote is caught first, and an auditor would refuse it too.
    try:
        audit_store.cast_vote(p, "lin", Decision.APPROVE, FINANCE, T0)
    except VoteAlreadyCast:
        pass
    else:
        raise AssertionError("lin counted twice")
    assert len(_vote_rows(audit_store)) == 2


def test_a_second_vote_of_a_principal_is_told_apart(audit_store: OrchestratorStore) -> None:
    p = _started(audit_store)
    audit_store.cast_vote(p, "lee", Decision.APPROVE, LEADS, T0)
    try:
        audit_store.cast_vote(p, "lee", Decision.DECLINE, LEADS, T0 + timedelta(seconds=1))
    except VoteAlreadyCast as again:
        assert again.vote.decision is Decision.APPROVE
    else:
        raise AssertionError("a second vote was not told apart")
    assert len(_vote_rows(audit_store)) == 1


def test_a_vote_never_goes_back_in_time(audit_store: OrchestratorStore) -> None:
    p = _started(audit_store)
    audit_store.cast_vote(p, "lee", Decision.APPROVE, LEADS, T0 + timedelta(minutes=5))
    late = audit_store.cast_vote(p, "lin", Decision.APPROVE, LEADS, T0 + timedelta(minutes=1))
    assert late.vote.at == T0 + timedelta(minutes=5)


def test_concurrent_last_votes_are_decided_one_at_a_time(audit_store: OrchestratorStore) -> None:
    # Each round: one lead has approved; eight principals holding every group approve at once. Exactly one
    # completes the leads' stage; under distinct stages the rest may still decide the finance stage, one of
    # them completing it; everything after is refused as the review has ended.
    for round_ in range(10):
        p = _started(audit_store, f"T-{round_}")
        audit_store.cast_vote(p, "lee", Decision.APPROVE, LEADS, T0)
        with ThreadPoolExecutor(8) as pool:
            casts = list(
                pool.map(
                    lambda i, p=p: audit_store.cast_vote(p, f"r{i}", Decision.APPROVE, LEADS | FINANCE, T0), range(8)
                )
            )
        outcomes = sorted(c.effect.outcome for c in casts)
        assert outcomes.count(VoteOutcome.ADVANCES) == 1 and outcomes.count(VoteOutcome.COMPLETES) == 1
        refused = [c for c in casts if c.effect.outcome is VoteOutcome.REFUSED]
        assert len(refused) == 6 and all(c.effect.refusal is VoteRefusal.REVIEW_ENDED for c in refused)
        assert sum(c.written for c in casts) == 2
        assert len(audit_store.votes(p.operation_id)) == 3
    assert all(encode_leaf(leaf) for leaf in leaves(audit_store))
