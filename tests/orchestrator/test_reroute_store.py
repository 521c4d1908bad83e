"""Re-routing in the store, on SQLite and PostgreSQL: a pending review on which nothing was decided moves to
the rule given, with its ``reroute`` leaf, in one transaction; one with a vote or an escalation keeps its
rule; a decided, expired or superseded one is left alone; and a decision or a vote taken under the rule a
review followed before the re-route is refused (ReviewRerouted) with nothing written, so the audit log
never shows a decision the rule it then followed did not make."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
import sqlalchemy as sa

from decisionflow.review_rules import ReviewRule, Stage, default_rule, rule_digest
from decisionflow.transparency import HistoryError, RerouteLeaf, encode_leaf
from decisionflow.vocabulary import Decision, OperationState
from orchestrator.domain import Proposal
from orchestrator.schema import escalations, operations, proposals
from orchestrator.store import OrchestratorStore, RerouteOutcome, ReviewRerouted
from tests.support.audit import (
    ACTION,
    T0,
    audit_store,
    audited,
    decision,
    entries,
    leaves,
    proposal,
    review,
    sealed,
    started,
)

__all__ = ["audit_store"]

TWO_LEADS = ReviewRule(ACTION, (Stage("leads", ("support-leads",), 2),))
FINANCE = ReviewRule(ACTION, (Stage("finance", ("finance",)),))
LATER = T0 + timedelta(minutes=5)


def _digests(store: OrchestratorStore) -> dict[str, str | None]:
    with store.engine.connect() as conn:
        return {r.operation_id: r.rule_digest for r in conn.execute(sa.select(proposals))}


def test_an_untouched_review_moves_to_the_rule_with_its_leaf_and_a_dry_run_changes_nothing(
    audit_store: OrchestratorStore,
) -> None:
    p = started(audit_store, proposal("T-1"))
    assert audit_store.reroute_candidates(TWO_LEADS, None, 10) == (p.operation_id,)
    dry = audit_store.reroute(p.operation_id, TWO_LEADS, LATER, dry_run=True)
    assert (dry.outcome, dry.from_digest) == (RerouteOutcome.REROUTED, None)
    assert _digests(audit_store) == {p.operation_id: None} and len(entries(audit_store)) == 1

    done = audit_store.reroute(p.operation_id, TWO_LEADS, LATER, dry_run=False)
    assert (done.outcome, done.case_id) == (RerouteOutcome.REROUTED, p.case_id)
    assert _digests(audit_store) == {p.operation_id: rule_digest(TWO_LEADS)}
    assert audit_store.get_proposal(p.operation_id).rule == TWO_LEADS
    assert audit_store.get_operation(p.operation_id).rerouted_at == LATER
    assert leaves(audit_store)[-1] == RerouteLeaf(LATER, p.operation_id, ACTION, TWO_LEADS)
    assert audit_store.reroute_candidates(TWO_LEADS, None, 10) == ()
    assert audit_store.reroute(p.operation_id, TWO_LEADS, LATER, dry_run=False).outcome is RerouteOutcome.ALREADY

    # Back to the default rule: the digest is NULL again, and the leaf carries no rule.
    back = audit_store.reroute(p.operation_id, default_rule(ACTION), LATER, dry_run=False)
    assert (back.outcome, back.from_digest) == (RerouteOutcome.REROUTED, rule_digest(TWO_LEADS))
    assert _digests(audit_store) == {p.operation_id: None}
    assert leaves(audit_store)[-1] == RerouteLeaf(LATER, p.operation_id, ACTION, None)
    assert audited(audit_store).kinds == {"proposal": 1, "reroute": 2}


def test_a_review_with_a_vote_or_an_escalation_keeps_its_rule(audit_store: OrchestratorStore) -> None:
    voted = started(audit_store, dataclasses.replace(proposal("T-1"), rule=TWO_LEADS))
    audit_store.cast_vote(voted, "lee", Decision.APPROVE, frozenset({"support-leads"}), LATER)
    escalated = started(audit_store, dataclasses.replace(proposal("T-2"), rule=TWO_LEADS))
    with audit_store.engine.begin() as conn:
        conn.execute(
            sa.insert(escalations).values(operation_id=escalated.operation_id, stage_index=0, escalated_at=LATER)
        )
    before = len(entries(audit_store))
    assert audit_store.reroute(voted.operation_id, FINANCE, LATER, dry_run=False).outcome is (
        RerouteOutcome.KEPT_VOTES_CAST
    )
    assert audit_store.reroute(escalated.operation_id, FINANCE, LATER, dry_run=False).outcome is (
        RerouteOutcome.KEPT_ESCALATED
    )
    assert _digests(audit_store) == {p.operation_id: rule_digest(TWO_LEADS) for p in (voted, escalated)}
    assert len(entries(audit_store)) == before


def test_decided_expired_and_superseded_reviews_are_left_alone(audit_store: OrchestratorStore) -> None:
    decided = started(audit_store, proposal("T-1"))
    audit_store.record_decision(decision(decided), decided.case_id, [])
    expired = started(audit_store, proposal("T-2"))
    with audit_store.engine.begin() as conn:
        conn.execute(
            operations.update()
            .where(operations.c.operation_id == expired.operation_id)
            .values(state=OperationState.EXPIRED.value.lower())
        )
    parent = started(audit_store, proposal("T-3"))
    edit = proposal("T-3", "Edited.", parent=parent.operation_id, edited=True)
    current = audit_store.create_edit(edit, parent.operation_id, review(edit), [sealed(edit)])
    assert audit_store.reroute_candidates(TWO_LEADS, None, 10) == (current.operation_id,)
    for p in (decided, expired, parent):
        assert audit_store.reroute(p.operation_id, TWO_LEADS, LATER, dry_run=False).outcome is RerouteOutcome.ENDED
    assert set(_digests(audit_store).values()) == {None}


def _decided_under_the_old_rule(store: OrchestratorStore, p: Proposal) -> None:
    """The deciding call read the operation before the re-route (rerouted_at None then)."""
    with pytest.raises(ReviewRerouted):
        store.record_decision(decision(p), p.case_id, [], rerouted_at=None)


def test_a_decision_read_before_a_re_route_is_refused_and_one_read_after_it_is_recorded(
    audit_store: OrchestratorStore,
) -> None:
    p = started(audit_store, proposal("T-1"))
    audit_store.reroute(p.operation_id, TWO_LEADS, LATER, dry_run=False)
    _decided_under_the_old_rule(audit_store, p)
    assert audit_store.get_decision(p.operation_id) is None
    assert [row.kind for row in entries(audit_store)] == ["proposal", "reroute"]

    # Back to the default rule; a call that read the operation after that records its decision.
    audit_store.reroute(p.operation_id, default_rule(ACTION), LATER, dry_run=False)
    read = audit_store.get_operation(p.operation_id).rerouted_at
    audit_store.record_decision(decision(p, at=LATER), p.case_id, [], rerouted_at=read)
    assert audit_store.get_operation(p.operation_id).state is OperationState.APPROVED
    assert audited(audit_store).kinds == {"proposal": 1, "reroute": 2, "decision": 1}


def test_a_vote_cast_on_the_rule_a_review_followed_before_a_re_route_is_refused(
    audit_store: OrchestratorStore,
) -> None:
    p = started(audit_store, dataclasses.replace(proposal("T-1"), rule=TWO_LEADS))
    audit_store.reroute(p.operation_id, FINANCE, LATER, dry_run=False)
    with pytest.raises(ReviewRerouted):
        audit_store.cast_vote(p, "lee", Decision.APPROVE, frozenset({"support-leads"}), LATER)
    assert audit_store.votes(p.operation_id) == ()
    fresh = audit_store.get_proposal(p.operation_id)
    cast = audit_store.cast_vote(fresh, "fay", Decision.APPROVE, frozenset({"finance"}), LATER)
    assert cast.written and audited(audit_store).kinds == {"proposal": 1, "reroute": 1, "vote": 1}


def test_the_history_refuses_a_reroute_after_a_vote(audit_store: OrchestratorStore) -> None:
    p = started(audit_store, dataclasses.replace(proposal("T-1"), rule=TWO_LEADS))
    audit_store.cast_vote(p, "lee", Decision.APPROVE, frozenset({"support-leads"}), LATER)
    history = audited(audit_store)
    forged = RerouteLeaf(LATER, p.operation_id, ACTION, FINANCE)
    with pytest.raises(HistoryError, match="has votes or an escalation already"):
        history.read(len(entries(audit_store)), encode_leaf(forged))
