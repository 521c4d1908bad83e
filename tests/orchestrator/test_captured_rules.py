"""The review rule a proposal follows is captured with it, on SQLite and PostgreSQL: stored once by its
digest however many proposals follow it, referenced by the proposal, read back with it, and carried by
its audit leaf; a proposal under the default rule stores no rule and writes the leaf it always wrote.
Over a real server: the rule in force when a review starts is the one it keeps, a reloaded rules file
applying to the reviews started after it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from decisionflow.review_rules import ReviewRule, Stage, default_rule, encode_rule, rule_digest
from decisionflow.transparency import ProposalLeaf
from decisionflow.v1 import review_pb2
from orchestrator.schema import proposals, review_rules
from orchestrator.store import OrchestratorStore
from tests.support import rules_desk
from tests.support.audit import ACTION, audit_store, leaves, proposal, review, sealed, started
from tests.support.rules_desk import write_rules
from tests.support.stack import Stack, open_stack, start_request

__all__ = ["audit_store"]

TWO_STAGES = ReviewRule(
    ACTION,
    (Stage("leads", ("support-leads",), 2, 1, timedelta(hours=4), ("on-call-leads",)), Stage("finance", ("finance",))),
    timedelta(hours=72),
)


def _stored_rules(store: OrchestratorStore) -> list[tuple[str, bytes]]:
    with store.engine.connect() as conn:
        return [(r.digest, bytes(r.encoded)) for r in conn.execute(sa.select(review_rules))]


def _rule_digests(store: OrchestratorStore) -> dict[str, str | None]:
    with store.engine.connect() as conn:
        return {r.operation_id: r.rule_digest for r in conn.execute(sa.select(proposals))}


def test_a_rule_is_stored_once_by_digest_and_read_back_with_each_proposal(audit_store: OrchestratorStore) -> None:
    first = started(audit_store, replace(proposal("T-1"), rule=TWO_STAGES))
    second = started(audit_store, replace(proposal("T-2"), rule=TWO_STAGES))
    assert _stored_rules(audit_store) == [(rule_digest(TWO_STAGES), encode_rule(TWO_STAGES))]
    assert _rule_digests(audit_store) == {p.operation_id: rule_digest(TWO_STAGES) for p in (first, second)}
    for p in (first, second):
        read = audit_store.get_proposal(p.operation_id)
        assert read.rule == TWO_STAGES and read.review_rule() == TWO_STAGES
        assert audit_store.decision_inputs(p.operation_id).proposal.rule == TWO_STAGES
    [leaf, _] = leaves(audit_store)
    assert isinstance(leaf, ProposalLeaf) and leaf.rule == TWO_STAGES


def test_a_proposal_under_the_default_rule_stores_no_rule_and_writes_the_leaf_it_always_wrote(
    audit_store: OrchestratorStore,
) -> None:
    p = started(audit_store, proposal("T-1"))
    assert _stored_rules(audit_store) == [] and _rule_digests(audit_store) == {p.operation_id: None}
    read = audit_store.get_proposal(p.operation_id)
    assert read.rule is None and read.review_rule() == default_rule(ACTION)
    [leaf] = leaves(audit_store)
    assert isinstance(leaf, ProposalLeaf) and leaf.rule is None


def test_an_edit_captures_the_rule_it_is_given_and_leaves_its_parent_s(audit_store: OrchestratorStore) -> None:
    parent = started(audit_store, proposal("T-1"))
    edit = replace(proposal("T-1", "Edited.", parent=parent.operation_id, edited=True), rule=TWO_STAGES)
    stored = audit_store.create_edit(edit, parent.operation_id, review(edit), [sealed(edit)])
    assert stored.rule == TWO_STAGES and audit_store.get_proposal(parent.operation_id).rule is None
    assert [getattr(leaf, "rule", None) for leaf in leaves(audit_store)] == [None, TWO_STAGES]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A receiver and an orchestrator with a rules file."""
    opened = open_stack(tmp_path, review_rules_file=write_rules(tmp_path, rules_desk.TWO_STAGES))
    try:
        yield opened
    finally:
        opened.close()


def _start(stack: Stack, case_id: str) -> str:
    return str(stack.review().StartReview(start_request(case_id), timeout=30).proposal.operation_id)


def test_a_review_keeps_the_rule_in_force_when_it_started(stack: Stack, tmp_path: Path) -> None:
    before = _start(stack, "T-1")
    write_rules(tmp_path, "version = 1\n")
    [reload] = stack.servers[-1].reload
    assert reload() is True
    after = _start(stack, "T-2")
    engine = sa.create_engine(stack.orchestrator_url)
    try:
        with engine.connect() as conn:
            digests = dict(conn.execute(sa.select(proposals.c.operation_id, proposals.c.rule_digest)).all())
            [(digest, encoded)] = conn.execute(sa.select(review_rules.c.digest, review_rules.c.encoded)).all()
    finally:
        engine.dispose()
    assert digests == {before: digest, after: None}
    rule = ReviewRule(ACTION, (Stage("leads", ("support-leads",), 2), Stage("finance", ("finance",))))
    assert digest == rule_digest(rule) and bytes(encoded) == encode_rule(rule)
    # GetOperation says where a review under a rule stands, and nothing more of one under the default rule.
    read = {
        op: stack.review().GetOperation(review_pb2.GetOperationRequest(operation_id=op), timeout=30) for op in digests
    }
    assert read[before].operation.progress.approvals_needed == 2 and not read[after].operation.HasField("progress")
