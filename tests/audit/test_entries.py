"""Each event that changes what a case means writes one leaf in its own transaction, and that leaf
decodes to exactly what the event's rows store; a write that changes nothing writes no leaf; and the
leaf and its event commit or roll back together (on SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError

from decisionflow.transparency import (
    DecisionLeaf,
    EffectLeaf,
    ExpiryLeaf,
    ProposalLeaf,
    RejectionLeaf,
    SettlementLeaf,
    check_proposal,
    leaf_hash,
)
from decisionflow.vocabulary import Consistency, Decision, LookupStatus, OperationId, OperationState, Receipt
from orchestrator.domain import FirstAttempt, Proposal, Settlement
from orchestrator.errors import ReviewExpired, StaleProposal
from orchestrator.schema import cases
from orchestrator.store import DecisionAlreadyRecorded, OrchestratorStore
from tests.support.audit import T0, decision, entries, leaves, proposal, review, sealed, started

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def proposal_leaf_of(store: OrchestratorStore, operation_id: OperationId) -> ProposalLeaf:
    [leaf] = [leaf for leaf in leaves(store) if isinstance(leaf, ProposalLeaf) and leaf.operation_id == operation_id]
    return leaf


def stored_content_matches(leaf: ProposalLeaf, stored: Proposal) -> None:
    content = stored.content
    assert (leaf.case_id, leaf.operation_id) == (content.case_id, stored.operation_id)
    assert (leaf.action, leaf.body, leaf.evidence, leaf.policy) == (
        content.action,
        content.body,
        content.evidence,
        content.policy,
    )
    check_proposal(leaf)  # the content yields the operation id the leaf names


def test_a_started_proposal_leaf_holds_the_stored_proposal_its_author_and_its_time(
    audit_store: OrchestratorStore,
) -> None:
    p = started(audit_store, proposal(body="Line one\r\nline two.", author="alex@example.com"))
    stored = audit_store.get_proposal(p.operation_id)

    [row] = entries(audit_store)
    leaf = row.leaf
    assert isinstance(leaf, ProposalLeaf)
    stored_content_matches(leaf, stored)
    assert (leaf.event, leaf.principal, leaf.recorded_at, leaf.previous_operation_id) == (
        "started",
        stored.created_by,
        stored.created_at,
        None,
    )
    assert (row.kind, row.operation_id, row.case_id, row.recorded_at) == ("proposal", p.operation_id, "T-1", T0)
    assert row.hash == leaf_hash(row.data) and row.leaf_index is None


def test_a_replacement_and_an_edit_name_the_proposal_they_took_the_case_from(audit_store: OrchestratorStore) -> None:
    first = started(audit_store, proposal())
    replacement = proposal(
        body="Please update to 4.2.2.", parent=first.operation_id, author="bo@example.com", at=T0 + timedelta(seconds=5)
    )
    audit_store.create_proposal(replacement, review(replacement), [sealed(replacement)], first.operation_id)
    edit = proposal(
        body="Please update to 4.2.3.",
        parent=replacement.operation_id,
        edited=True,
        author="cy@example.com",
        at=T0 + timedelta(seconds=9),
    )
    audit_store.create_edit(edit, replacement.operation_id, review(edit), [sealed(edit)])

    replaced = proposal_leaf_of(audit_store, replacement.operation_id)
    stored_content_matches(replaced, audit_store.get_proposal(replacement.operation_id))
    assert (replaced.event, replaced.principal, replaced.previous_operation_id, replaced.recorded_at) == (
        "replaced",
        "bo@example.com",
        first.operation_id,
        T0 + timedelta(seconds=5),
    )
    edited = proposal_leaf_of(audit_store, edit.operation_id)
    stored_content_matches(edited, audit_store.get_proposal(edit.operation_id))
    assert (edited.event, edited.principal, edited.previous_operation_id, edited.recorded_at) == (
        "edited",
        "cy@example.com",
        replacement.operation_id,
        T0 + timedelta(seconds=9),
    )
    assert [row.kind for row in entries(audit_store)] == ["proposal"] * 3


def test_an_edit_back_to_an_existing_proposal_logs_that_proposal_by_its_editor_at_the_edit(
    audit_store: OrchestratorStore,
) -> None:
    first = started(audit_store, proposal())
    edit = proposal(
        body="Please update to 4.2.2.", parent=first.operation_id, edited=True, at=T0 + timedelta(seconds=3)
    )
    audit_store.create_edit(edit, first.operation_id, review(edit), [sealed(edit)])
    back = proposal(parent=edit.operation_id, edited=True, author="dora@example.com", at=T0 + timedelta(seconds=8))
    assert back.operation_id == first.operation_id
    audit_store.create_edit(back, edit.operation_id, review(back, "cp-back"), [sealed(back, "cp-back")])

    *_, last = entries(audit_store)
    leaf = last.leaf
    assert isinstance(leaf, ProposalLeaf)
    stored_content_matches(leaf, audit_store.get_proposal(first.operation_id))
    assert (leaf.event, leaf.principal, leaf.previous_operation_id, leaf.recorded_at) == (
        "edited",
        "dora@example.com",
        edit.operation_id,
        T0 + timedelta(seconds=8),
    )
    with audit_store.engine.connect() as conn:
        moved_at = conn.execute(sa.select(cases.c.updated_at).where(cases.c.case_id == "T-1")).scalar_one()
    assert moved_at == leaf.recorded_at  # the time the case's pointer moved


@pytest.mark.parametrize("verdict", [Decision.APPROVE, Decision.DECLINE])
def test_a_decision_leaf_is_the_ledger_row(audit_store: OrchestratorStore, verdict: Decision) -> None:
    p = started(audit_store, proposal())
    audit_store.record_decision(
        decision(p, verdict, at=T0 + timedelta(seconds=2), reviewer="ravi@example.com"), p.case_id, []
    )

    recorded = audit_store.get_decision(p.operation_id)
    assert recorded is not None
    [_, row] = entries(audit_store)
    assert row.leaf == DecisionLeaf(recorded.decided_at, p.operation_id, recorded.decision.value, recorded.reviewer)
    assert (row.kind, row.case_id, row.leaf.decision) == ("decision", "T-1", verdict.value)


def test_a_receipt_leaf_is_the_committed_operation_and_a_second_receipt_writes_none(
    audit_store: OrchestratorStore,
) -> None:
    p = started(audit_store, proposal())
    audit_store.record_decision(decision(p), p.case_id, [])
    at = T0 + timedelta(seconds=4)
    audit_store.record_receipt(p.operation_id, Receipt("rcpt-1", p.operation_id, T0 + timedelta(seconds=3)), at)
    audit_store.record_receipt(p.operation_id, Receipt("rcpt-2", p.operation_id, at), at + timedelta(seconds=1))

    operation = audit_store.get_operation(p.operation_id)
    assert operation.state is OperationState.COMMITTED and operation.receipt is not None
    [_, _, row] = entries(audit_store)
    assert row.leaf == EffectLeaf(
        operation.state_changed_at, p.operation_id, operation.receipt.receipt_id, operation.receipt.applied_at
    )
    assert row.leaf == EffectLeaf(at, p.operation_id, "rcpt-1", T0 + timedelta(seconds=3))


@contextmanager
def sent(store: OrchestratorStore) -> Iterator[list[str]]:
    """The SQL of every statement sent to the database while the block runs, in order."""
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", record)


def test_a_first_approves_leaves_ride_on_its_updates_on_postgresql_with_no_insert_of_their_own(
    audit_store: OrchestratorStore,
) -> None:
    p = started(audit_store, proposal())
    at = T0 + timedelta(seconds=2)
    attempt = FirstAttempt(b"payload", "0" * 64, at + timedelta(seconds=30), "test:1")
    receipt = Receipt("rcpt-1", p.operation_id, T0 + timedelta(seconds=3))
    with sent(audit_store) as deciding:
        audit_store.record_decision(decision(p, at=at), p.case_id, [sealed(p, "cp-final")], attempt)
    with sent(audit_store) as receiving:
        audit_store.record_receipt(p.operation_id, receipt, at + timedelta(seconds=2))

    # A leaf inserted on its own is a round trip on PostgreSQL; SQLite's WITH holds no INSERT.
    own_inserts = 0 if audit_store.engine.dialect.name == "postgresql" else 1
    for statements in (deciding, receiving):
        assert sum(sql.lstrip().startswith("INSERT INTO audit_entries") for sql in statements) == own_inserts
    [_, decided, effect] = entries(audit_store)
    assert (decided.kind, decided.case_id, decided.recorded_at) == ("decision", "T-1", at)
    assert decided.leaf == DecisionLeaf(at, p.operation_id, Decision.APPROVE.value, "rita@example.com")
    assert (effect.kind, effect.case_id, effect.recorded_at) == ("effect", "T-1", at + timedelta(seconds=2))
    assert effect.leaf == EffectLeaf(at + timedelta(seconds=2), p.operation_id, "rcpt-1", receipt.applied_at)
    assert decided.entry_id < effect.entry_id and effect.hash == leaf_hash(effect.data)
    operation = audit_store.get_operation(p.operation_id)
    assert (operation.state, operation.receipt, operation.attempts) == (OperationState.COMMITTED, receipt, 1)


@pytest.mark.parametrize("attempt", [False, True], ids=["decline", "approve-with-attempt"])
def test_a_decision_on_an_expired_review_writes_no_leaf(audit_store: OrchestratorStore, attempt: bool) -> None:
    p = started(audit_store, proposal())
    assert audit_store.housekeeping.expire_reviews(T0 + timedelta(days=5), T0 + timedelta(days=35), dry_run=False)
    at = T0 + timedelta(days=36)
    first = FirstAttempt(b"payload", "0" * 64, at + timedelta(seconds=30), "test:1") if attempt else None
    verdict = Decision.APPROVE if attempt else Decision.DECLINE
    with pytest.raises(ReviewExpired):
        audit_store.record_decision(decision(p, verdict, at=at), p.case_id, [], first)
    assert audit_store.get_decision(p.operation_id) is None
    assert [row.kind for row in entries(audit_store)] == ["proposal", "expiry"]


def test_a_rejection_leaf_holds_the_reason_as_stored(audit_store: OrchestratorStore) -> None:
    p = started(audit_store, proposal())
    audit_store.record_decision(decision(p), p.case_id, [])
    at = T0 + timedelta(seconds=4)
    audit_store.record_rejection(p.operation_id, "refused: " + "x" * 3000, at)
    audit_store.record_rejection(p.operation_id, "again", at + timedelta(seconds=1))  # settled: nothing changes

    operation = audit_store.get_operation(p.operation_id)
    assert operation.rejection_reason is not None and len(operation.rejection_reason) == 2000
    [_, _, row] = entries(audit_store)
    assert row.leaf == RejectionLeaf(operation.state_changed_at, p.operation_id, operation.rejection_reason)
    assert row.recorded_at == at


def test_a_settlement_leaf_names_the_caller_for_each_operation_the_lookup_committed(
    audit_store: OrchestratorStore,
) -> None:
    applied = started(audit_store, proposal(case_id="T-1"))
    missing = started(audit_store, proposal(case_id="T-2"))
    for p in (applied, missing):
        audit_store.record_decision(decision(p), p.case_id, [])
    looked = T0 + timedelta(minutes=1)
    receipt = Receipt("rcpt-l", applied.operation_id, T0)
    settlements = [
        Settlement(missing.operation_id, LookupStatus.NOT_FOUND, Consistency.STRONG, None, "", looked),
        Settlement(applied.operation_id, LookupStatus.APPLIED, Consistency.STRONG, receipt, "", looked),
    ]
    audit_store.settle(settlements, settled_by="reconciler-1")
    audit_store.settle(settlements, settled_by="reconciler-2")  # settled already: only noted

    operation = audit_store.get_operation(applied.operation_id)
    [row] = [row for row in entries(audit_store) if row.kind == "settlement"]
    assert row.leaf == SettlementLeaf(
        operation.state_changed_at,
        applied.operation_id,
        "COMMITTED",
        "reconciler-1",
        receipt.receipt_id,
        receipt.applied_at,
    )
    assert (operation.state, operation.state_changed_at, row.case_id) == (OperationState.COMMITTED, looked, "T-1")
    assert len(entries(audit_store)) == 5


def test_an_expiry_leaf_for_each_review_expired_and_none_on_a_dry_run(audit_store: OrchestratorStore) -> None:
    ops = [started(audit_store, proposal(case_id=case)).operation_id for case in ("T-2", "T-1", "T-3")]
    cutoff, now = T0 + timedelta(days=5), T0 + timedelta(days=35)
    assert audit_store.housekeeping.expire_reviews(cutoff, now, dry_run=True) == 3
    assert len(entries(audit_store)) == 3
    assert audit_store.housekeeping.expire_reviews(cutoff, now, dry_run=False) == 3

    expired = [row for row in entries(audit_store) if row.kind == "expiry"]
    assert [row.leaf for row in expired] == [ExpiryLeaf(now, op) for op in sorted(ops)]
    for row in expired:
        operation = audit_store.get_operation(OperationId(row.operation_id))
        assert (operation.state, operation.state_changed_at, operation.case_id) == (
            OperationState.EXPIRED,
            row.recorded_at,
            row.case_id,
        )


def test_writes_that_change_nothing_write_no_leaf(audit_store: OrchestratorStore) -> None:
    first = started(audit_store, proposal())
    again = proposal(author="sam@example.com", at=T0 + timedelta(minutes=1))
    assert audit_store.create_proposal(again, review(again, "cp-2"), [sealed(again, "cp-2")])[1] is False
    edit = proposal(body="Please update to 4.2.2.", parent=first.operation_id, edited=True)
    audit_store.create_edit(edit, first.operation_id, review(edit), [sealed(edit)])
    stale = proposal(body="Please update to 4.2.3.", parent=first.operation_id, edited=True)
    with pytest.raises(StaleProposal):
        audit_store.create_edit(stale, first.operation_id, review(stale), [sealed(stale)])
    audit_store.record_decision(decision(edit), edit.case_id, [])
    with pytest.raises(DecisionAlreadyRecorded):
        audit_store.record_decision(decision(edit, Decision.DECLINE), edit.case_id, [])
    with pytest.raises(StaleProposal):
        audit_store.record_decision(decision(first), first.case_id, [])

    assert [(row.kind, row.operation_id) for row in entries(audit_store)] == [
        ("proposal", first.operation_id),
        ("proposal", edit.operation_id),
        ("decision", edit.operation_id),
    ]


def _count(store: OrchestratorStore, table: str) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


def test_a_failure_after_the_leaf_in_the_decisions_transaction_rolls_back_the_leaf_and_the_decision(
    audit_store: OrchestratorStore,
) -> None:
    p = started(audit_store, proposal())
    # The decision's final checkpoint reuses the id of the start's: its insert, after the leaf's, fails.
    with pytest.raises(IntegrityError):
        audit_store.record_decision(decision(p), p.case_id, [sealed(p)])

    assert audit_store.get_decision(p.operation_id) is None
    assert audit_store.get_operation(p.operation_id).state is OperationState.PENDING_REVIEW
    assert [row.kind for row in entries(audit_store)] == ["proposal"]
    # The same decision then commits with its leaf, once.
    audit_store.record_decision(decision(p), p.case_id, [sealed(p, "cp-final")])
    assert [row.kind for row in entries(audit_store)] == ["proposal", "decision"]


REFUSE_LEAVES = {
    "sqlite": [
        "CREATE TRIGGER refuse_leaf BEFORE INSERT ON audit_entries WHEN NEW.kind = :kind "
        "BEGIN SELECT RAISE(ABORT, 'leaf refused'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION refuse_leaf() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'leaf refused'; END $$",
        "CREATE TRIGGER refuse_leaf BEFORE INSERT ON audit_entries FOR EACH ROW WHEN (NEW.kind = :kind) "
        "EXECUTE FUNCTION refuse_leaf()",
    ],
}


def refuse_leaves(store: OrchestratorStore, kind: str) -> None:
    """Make every insert of a leaf of kind fail, as a full or broken table would."""
    with store.engine.begin() as conn:
        for statement in REFUSE_LEAVES[store.engine.dialect.name]:
            # DDL takes no bind parameters: the kind is one of ours, quoted here.
            conn.exec_driver_sql(statement.replace(":kind", f"'{kind}'"))


def test_a_decision_whose_leaf_cannot_be_written_is_not_recorded(audit_store: OrchestratorStore) -> None:
    p = started(audit_store, proposal())
    refuse_leaves(audit_store, "decision")
    with pytest.raises(DBAPIError):
        audit_store.record_decision(decision(p), p.case_id, [sealed(p, "cp-final")])
    assert audit_store.get_decision(p.operation_id) is None
    assert audit_store.get_operation(p.operation_id).state is OperationState.PENDING_REVIEW
    assert _count(audit_store, "checkpoints") == 1
    assert [row.kind for row in entries(audit_store)] == ["proposal"]


def test_a_proposal_whose_leaf_cannot_be_written_is_not_recorded(audit_store: OrchestratorStore) -> None:
    refuse_leaves(audit_store, "proposal")
    p = proposal()
    with pytest.raises(DBAPIError):
        audit_store.create_proposal(p, review(p), [sealed(p)])
    assert audit_store.find_proposal(p.operation_id) is None
    assert audit_store.current_operation_id(p.case_id) is None
    assert (_count(audit_store, "checkpoints"), _count(audit_store, "audit_entries")) == (0, 0)
