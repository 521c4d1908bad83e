"""The campaigns' audit-log check (tests.campaigns.auditlog) on a real store of each kind: a log written by
the store's events holds, and a decision without its leaf, a leaf deleted from the sequenced log, a decision
leaf without its row, a changed decision, a proposal leaf that does not yield its id, a wrong stored subtree
hash, and an outcome leaf missing, saying another receipt than the operation's row or left beside a row in
another state are each named."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
import sqlalchemy as sa

from decisionflow.transparency import ProposalLeaf, decode_leaf, encode_leaf, leaf_hash
from decisionflow.vocabulary import Consistency, Decision, LookupStatus, OperationId, OperationState, Receipt
from orchestrator.domain import Settlement
from orchestrator.schema import audit_entries, audit_nodes, decisions, operations
from orchestrator.store import OrchestratorStore
from tests.campaigns.auditlog import LogAuditor
from tests.support.audit import T0, decision, proposal, started

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def _url(store: OrchestratorStore) -> str:
    return store.engine.url.render_as_string(hide_password=False)


def _events(store: OrchestratorStore, cases: range) -> list[OperationId]:
    """A proposal on each case; every case but the last decided (approve, decline, ...)."""
    ops = []
    for n in cases:
        p = started(store, proposal(case_id=f"T-{n}", at=T0 + timedelta(seconds=n)))
        if n != cases[-1]:
            verdict = Decision.APPROVE if n % 2 == 0 else Decision.DECLINE
            store.record_decision(decision(p, verdict, at=T0 + timedelta(seconds=n, milliseconds=5)), p.case_id, [])
        ops.append(p.operation_id)
    return ops


def _delete_entry(store: OrchestratorStore, operation_id: str, kind: str) -> None:
    with store.engine.begin() as conn:
        deleted = conn.execute(
            audit_entries.delete().where(audit_entries.c.operation_id == operation_id, audit_entries.c.kind == kind)
        )
        assert deleted.rowcount == 1


def test_a_log_written_by_the_stores_events_holds_and_a_later_run_proves_only_the_new_leaves(
    audit_store: OrchestratorStore,
) -> None:
    _events(audit_store, range(4))  # 4 proposals, 3 decisions
    auditor = LogAuditor(_url(audit_store))
    first = auditor.check()
    assert first.failures == []
    assert (first.leaves, first.decisions, first.proposals, first.checkpoints, first.proofs) == (7, 3, 4, 1, 7)

    _events(audit_store, range(4, 6))  # 2 proposals, 1 decision
    second = auditor.check()
    assert second.failures == []
    # 3 new inclusion proofs, and the consistency proof from the checkpoint of size 7.
    assert (second.leaves, second.decisions, second.checkpoints, second.proofs) == (10, 4, 2, 4)
    assert auditor.kept is not None and auditor.kept.size == auditor.proved == 10


def test_a_decision_recorded_without_its_leaf_is_named(audit_store: OrchestratorStore) -> None:
    ops = _events(audit_store, range(3))
    _delete_entry(audit_store, ops[1], "decision")  # before the sequencer saw it: the log itself holds

    failures = LogAuditor(_url(audit_store)).check().failures

    assert failures == [
        f"audit log: {ops[1]}: DECLINE by rita@example.com is recorded, but no decision leaf of it is in the log"
    ]


def test_a_leaf_deleted_from_the_sequenced_log_is_named(audit_store: OrchestratorStore) -> None:
    ops = _events(audit_store, range(3))
    auditor = LogAuditor(_url(audit_store))
    assert auditor.check().failures == []
    _delete_entry(audit_store, ops[0], "decision")  # leaf 1: proposal 0, decision 0, proposal 1, ...

    failures = auditor.check().failures

    assert "audit log: no leaf at indices [1] of 0 … 4" in failures
    assert (
        f"audit log: {ops[0]}: APPROVE by rita@example.com is recorded, but no decision leaf of it is in the log"
        in (failures)
    )
    # The signed checkpoint still vouches for the deleted leaf: its root is no longer the leaves'.
    assert "audit log: the checkpoint of size 5 is not the root of the first 5 leaves" in failures


def test_a_decision_leaf_without_its_row_and_a_changed_decision_are_named(audit_store: OrchestratorStore) -> None:
    ops = _events(audit_store, range(3))
    with audit_store.engine.begin() as conn:
        conn.execute(decisions.delete().where(decisions.c.operation_id == ops[0]))
        conn.execute(
            decisions.update().where(decisions.c.operation_id == ops[1]).values(reviewer="mallory@example.com")
        )

    failures = LogAuditor(_url(audit_store)).check().failures

    assert len(failures) == 2, failures
    assert failures[0].startswith(f"audit log: leaf 3 ({ops[1]}): DECLINE by rita@example.com at ")
    assert failures[0].endswith(
        "but the decisions table records DECLINE by mallory@example.com at " + failures[0][-32:]
    )
    assert failures[1] == f"audit log: leaf 1 ({ops[0]}): a decision leaf of an operation with no recorded decision"


def test_a_proposal_leaf_whose_content_does_not_yield_its_operation_id_is_named(
    audit_store: OrchestratorStore,
) -> None:
    ops = _events(audit_store, range(2))
    with audit_store.engine.begin() as conn:
        entry_id, data = conn.execute(
            sa.select(audit_entries.c.entry_id, audit_entries.c.leaf).where(
                audit_entries.c.operation_id == ops[1], audit_entries.c.kind == "proposal"
            )
        ).one()
        leaf = decode_leaf(bytes(data))
        assert isinstance(leaf, ProposalLeaf)
        forged = encode_leaf(replace(leaf, body="Please update to 4.2.2."))
        conn.execute(
            audit_entries.update()
            .where(audit_entries.c.entry_id == entry_id)
            .values(leaf=forged, leaf_hash=leaf_hash(forged))
        )

    failures = LogAuditor(_url(audit_store)).check().failures

    assert len(failures) == 1, failures
    assert failures[0].startswith("audit log: leaf 2: ") and failures[0].endswith(f"(proposal of {ops[1]})")


def test_a_stored_subtree_hash_that_is_not_its_leaves_is_named(audit_store: OrchestratorStore) -> None:
    _events(audit_store, range(3))
    auditor = LogAuditor(_url(audit_store))
    assert auditor.check().failures == []
    with audit_store.engine.begin() as conn:
        conn.execute(
            audit_nodes.update().where(audit_nodes.c.level == 1, audit_nodes.c.node_index == 1).values(hash=bytes(32))
        )

    failures = auditor.check().failures

    # No leaf is new, so no inclusion proof is asked for: the stored hashes are checked all the same.
    assert failures == ["audit log: 1 stored subtree hashes wrong: level 1 index 1"]


def test_a_failure_is_reported_once_by_the_first_check_that_finds_it(audit_store: OrchestratorStore) -> None:
    ops = _events(audit_store, range(3))
    _delete_entry(audit_store, ops[0], "decision")
    auditor = LogAuditor(_url(audit_store))
    first = auditor.check()
    _events(audit_store, range(3, 4))

    second = auditor.check()

    assert len(first.failures) == 1 and ops[0] in first.failures[0]
    assert second.failures == []
    assert auditor.figures()["audit_violations"] == 1


def _outcomes(store: OrchestratorStore) -> list[OperationId]:
    """Five reviews, each ending another way: COMMITTED by a receipt, REJECTED, COMMITTED by a lookup, EXPIRED,
    and DECLINED (which no outcome leaf records)."""
    ps = [started(store, proposal(case_id=f"T-{n}", at=T0 + timedelta(seconds=n))) for n in range(5)]
    ops = [p.operation_id for p in ps]
    later = T0 + timedelta(minutes=1)
    for p, verdict in ((ps[0], Decision.APPROVE), (ps[1], Decision.APPROVE), (ps[2], Decision.APPROVE)):
        store.record_decision(decision(p, verdict, at=later), p.case_id, [])
    store.record_decision(decision(ps[4], Decision.DECLINE, at=later), ps[4].case_id, [])  # ps[3] is left to expire
    store.record_receipt(ops[0], Receipt("rcpt-0", ops[0], later + timedelta(seconds=1)), later + timedelta(seconds=2))
    store.record_rejection(ops[1], "refused: the account is closed", later + timedelta(seconds=3))
    found = Receipt("rcpt-2", ops[2], later + timedelta(seconds=4))
    looked = later + timedelta(seconds=5)
    settlement = Settlement(ops[2], LookupStatus.APPLIED, Consistency.STRONG, found, "", looked)
    store.settle([settlement], settled_by="reconciler-1")
    assert store.housekeeping.expire_reviews(T0 + timedelta(days=5), T0 + timedelta(days=35), dry_run=False)
    states = [store.get_operation(op).state for op in ops]
    assert states == [
        OperationState.COMMITTED,
        OperationState.REJECTED,
        OperationState.COMMITTED,
        OperationState.EXPIRED,
        OperationState.DECLINED,
    ]
    return ops


def test_every_outcome_the_operations_table_holds_has_its_one_leaf(audit_store: OrchestratorStore) -> None:
    _outcomes(audit_store)

    check = LogAuditor(_url(audit_store)).check()

    assert check.failures == []
    # 5 proposals, 4 decisions, an effect, a rejection, a settlement and an expiry.
    assert (check.leaves, check.decisions, check.proposals, check.outcomes) == (13, 4, 5, 4)


def test_an_outcome_without_its_leaf_another_receipt_and_a_leaf_beside_another_state_are_named(
    audit_store: OrchestratorStore,
) -> None:
    ops = _outcomes(audit_store)
    _delete_entry(audit_store, ops[1], "rejection")
    with audit_store.engine.begin() as conn:
        conn.execute(operations.update().where(operations.c.operation_id == ops[0]).values(receipt_id="rcpt-forged"))
        conn.execute(operations.update().where(operations.c.operation_id == ops[2]).values(state="unknown"))

    failures = LogAuditor(_url(audit_store)).check().failures

    assert len(failures) == 3, failures
    receipt, rejection, settled = ([f for f in failures if op in f] for op in ops[:3])
    assert len(receipt) == 1 and receipt[0].startswith("audit log: leaf ")
    assert f"({ops[0]}): effect COMMITTED at " in receipt[0]
    assert "with receipt 'rcpt-0' applied at " in receipt[0]
    assert "but the operations table holds COMMITTED at " in receipt[0]
    assert "with receipt 'rcpt-forged' applied at " in receipt[0]
    assert rejection == [
        f"audit log: {ops[1]}: REJECTED in the operations table, with 0 outcome leaves (leaves []) "
        "where one rejection leaf belongs"
    ]
    assert len(settled) == 1 and settled[0].startswith("audit log: leaf ")
    assert settled[0].endswith(f"({ops[2]}): a settlement leaf of an operation not in a state it records")
