"""The sequencer on SQLite and PostgreSQL: contiguous indices in entry order, stored subtrees that give the
tree's root and every proof, checkpoints signed only of the sequenced prefix (by each key once), and the
log read back through the AuditLogReader port, also while sequencers and writers run at once."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from decisionflow.transparency import (
    InvalidTreeRange,
    NoteSigner,
    NoteVerifier,
    consistency_proof,
    inclusion_proof,
    open_checkpoint,
    subtree_hashes_of_leaves,
    tree_hash,
)
from decisionflow.vocabulary import CaseId, Decision, OperationId
from orchestrator.audit_log.ports import AuditLogReader
from orchestrator.audit_log.signing import CheckpointSigner
from orchestrator.store import OrchestratorStore
from tests.support.audit import ORIGIN, SIGNER, T0, check_log, decision, entries, proposal, started

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def write_events(store: OrchestratorStore, cases: int, *, prefix: str = "T") -> list[OperationId]:
    """A proposal and a decision on each of cases cases: two entries each."""
    ops = []
    for n in range(cases):
        p = started(store, proposal(case_id=f"{prefix}-{n}", at=T0 + timedelta(seconds=n)))
        verdict = Decision.APPROVE if n % 2 else Decision.DECLINE
        store.record_decision(decision(p, verdict, at=T0 + timedelta(seconds=n, milliseconds=5)), p.case_id, [])
        ops.append(p.operation_id)
    return ops


def test_the_store_is_an_audit_log_reader(audit_store: OrchestratorStore) -> None:
    reader: AuditLogReader = audit_store
    assert reader.latest_checkpoint() is None and reader.leaves(0, 10) == []


def test_entries_get_contiguous_indices_in_entry_order_and_a_checkpoint_once_the_backlog_is_done(
    audit_store: OrchestratorStore,
) -> None:
    assert audit_store.sequence_audit_log(5, SIGNER, T0).checkpoint is None  # an empty log is not signed
    write_events(audit_store, 6)  # 12 entries

    first = audit_store.sequence_audit_log(5, SIGNER, T0 + timedelta(minutes=1))
    second = audit_store.sequence_audit_log(5, SIGNER, T0 + timedelta(minutes=1))
    assert (first.sequenced, first.size, first.checkpoint, second.size, second.checkpoint) == (5, 5, None, 10, None)
    last = audit_store.sequence_audit_log(5, SIGNER, T0 + timedelta(minutes=2))
    assert (last.sequenced, last.size) == (2, 12)

    rows = entries(audit_store)
    assert [row.leaf_index for row in rows] == list(range(12))
    assert last.checkpoint is not None
    checkpoint = open_checkpoint(last.checkpoint.signed_note, [NoteVerifier.from_vkey(SIGNER.vkey)], origin=ORIGIN)
    assert (checkpoint.size, checkpoint.root_hash) == (12, tree_hash([row.hash for row in rows]))
    assert audit_store.latest_checkpoint() == last.checkpoint == audit_store.checkpoint(12)
    assert last.checkpoint.signed_at == T0 + timedelta(minutes=2)
    assert audit_store.checkpoint(10) is None
    assert check_log(audit_store, [last.checkpoint], SIGNER.vkey, ORIGIN) == 12


def test_each_size_is_signed_once_per_key_and_a_new_key_signs_the_size_the_old_one_did(
    audit_store: OrchestratorStore,
) -> None:
    write_events(audit_store, 2)
    signed = audit_store.sequence_audit_log(100, SIGNER, T0).checkpoint
    assert signed is not None
    assert audit_store.sequence_audit_log(100, SIGNER, T0 + timedelta(minutes=1)).checkpoint is None

    rotated = CheckpointSigner(ORIGIN, NoteSigner.from_seed(ORIGIN, bytes(range(1, 33))))
    resigned = audit_store.sequence_audit_log(100, rotated, T0 + timedelta(minutes=2)).checkpoint
    assert resigned is not None and (resigned.size, resigned.root_hash) == (signed.size, signed.root_hash)
    assert audit_store.latest_checkpoint() == resigned == audit_store.checkpoint(4)
    open_checkpoint(resigned.signed_note, [NoteVerifier.from_vkey(rotated.vkey)], origin=ORIGIN)

    write_events(audit_store, 1, prefix="U")
    newer = audit_store.sequence_audit_log(100, rotated, T0 + timedelta(minutes=3)).checkpoint
    assert newer is not None and newer.size == 6
    check_log(audit_store, [resigned, newer], rotated.vkey, ORIGIN)


def test_without_a_key_the_log_is_sequenced_and_nothing_is_signed(audit_store: OrchestratorStore) -> None:
    write_events(audit_store, 2)
    done = audit_store.sequence_audit_log(100, None, T0)
    assert (done.sequenced, done.size, done.checkpoint) == (4, 4, None)
    assert audit_store.latest_checkpoint() is None
    assert [leaf.index for leaf in audit_store.leaves(0, 10)] == [0, 1, 2, 3]


def test_leaves_page_and_indices_are_found_by_operation_and_by_case(audit_store: OrchestratorStore) -> None:
    ops = write_events(audit_store, 3)
    unsequenced = started(audit_store, proposal(case_id="T-9"))
    audit_store.sequence_audit_log(6, SIGNER, T0)  # the last proposal stays unsequenced
    rows = entries(audit_store)

    assert [(leaf.index, leaf.data) for leaf in audit_store.leaves(2, 3)] == [(i, rows[i].data) for i in (2, 3, 4)]
    assert [leaf.index for leaf in audit_store.leaves(5, 10)] == [5]
    assert audit_store.leaves(6, 10) == []
    assert audit_store.leaf_indices(operation_id=ops[1]) == [2, 3]
    assert audit_store.leaf_indices(case_id=CaseId("T-2")) == [4, 5]
    assert audit_store.leaf_indices(operation_id=ops[1], case_id=CaseId("T-2")) == []
    assert audit_store.leaf_indices(case_id=CaseId("T-9")) == []  # written, not yet in the log
    assert audit_store.leaf_indices(operation_id=unsequenced.operation_id) == []
    with pytest.raises(ValueError, match="operation id or a case id"):
        audit_store.leaf_indices()


def test_proofs_are_refused_beyond_the_sequenced_log_and_outside_a_tree(audit_store: OrchestratorStore) -> None:
    write_events(audit_store, 2)
    audit_store.sequence_audit_log(3, SIGNER, T0)  # 3 of 4 entries
    audit_store.inclusion_proof(2, 3)
    for refused in (
        lambda: audit_store.inclusion_proof(0, 4),
        lambda: audit_store.inclusion_proof(3, 3),
        lambda: audit_store.consistency_proof(1, 4),
        lambda: audit_store.consistency_proof(0, 3),
        lambda: audit_store.consistency_proof(3, 2),
        lambda: audit_store.leaves(-1, 2),
    ):
        with pytest.raises(InvalidTreeRange):
            refused()


def test_every_proof_of_every_size_comes_from_the_stored_nodes(audit_store: OrchestratorStore) -> None:
    write_events(audit_store, 9)  # 18 leaves, sequenced a few at a time: every tree shape on the way
    sizes = [audit_store.sequence_audit_log(3, None, T0).size for _ in range(7)]
    assert sizes == [3, 6, 9, 12, 15, 18, 18]
    size = audit_store.sequence_audit_log(100, SIGNER, T0).size
    hashes = [row.hash for row in entries(audit_store)]
    reference = subtree_hashes_of_leaves(hashes)
    for n in range(1, size + 1):
        for m in range(n):
            assert list(audit_store.inclusion_proof(m, n)) == inclusion_proof(m, n, reference)
        for m in range(1, n + 1):
            assert list(audit_store.consistency_proof(m, n)) == consistency_proof(m, n, reference)


def test_the_status_reports_the_backlog_the_size_and_what_no_checkpoint_covers(audit_store: OrchestratorStore) -> None:
    empty = audit_store.audit_status()
    assert (empty.unsequenced, empty.oldest_unsequenced_at, empty.size, empty.checkpoint_size) == (0, None, 0, 0)
    assert (empty.checkpoint_signed_at, empty.oldest_unsigned_at) == (None, None)
    write_events(audit_store, 2)
    status = audit_store.audit_status()
    assert (status.unsequenced, status.oldest_unsequenced_at, status.size) == (4, T0, 0)

    audit_store.sequence_audit_log(2, None, T0)
    status = audit_store.audit_status()
    assert (status.unsequenced, status.oldest_unsequenced_at, status.size) == (2, T0 + timedelta(seconds=1), 2)
    assert (status.checkpoint_size, status.oldest_unsigned_at) == (0, T0)

    audit_store.sequence_audit_log(10, SIGNER, T0 + timedelta(hours=1))
    status = audit_store.audit_status()
    assert (status.unsequenced, status.size, status.checkpoint_size) == (0, 4, 4)
    assert (status.checkpoint_signed_at, status.oldest_unsigned_at) == (T0 + timedelta(hours=1), None)


def test_sequencers_and_writers_at_once_leave_one_gapless_log_every_checkpoint_consistent(
    audit_store: OrchestratorStore,
) -> None:
    stop = threading.Event()
    failures: list[BaseException] = []
    checkpoints = []

    def sequencer() -> None:
        try:
            while not stop.is_set():
                signed = audit_store.sequence_audit_log(3, SIGNER, T0).checkpoint
                if signed is not None:
                    checkpoints.append(signed)
        except BaseException as exc:
            failures.append(exc)

    def writer(prefix: str) -> None:
        try:
            write_events(audit_store, 12, prefix=prefix)
        except BaseException as exc:
            failures.append(exc)

    sequencers = [threading.Thread(target=sequencer) for _ in range(3)]
    writers = [threading.Thread(target=writer, args=(prefix,)) for prefix in ("A", "B")]
    for thread in sequencers + writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    for thread in sequencers:
        thread.join()
    assert failures == []
    final = audit_store.sequence_audit_log(100, SIGNER, T0).checkpoint
    checkpoints += [] if final is None else [final]

    rows = entries(audit_store)
    assert len(rows) == 48
    assert sorted(row.leaf_index for row in rows if row.leaf_index is not None) == list(range(48))
    checkpoints.sort(key=lambda c: c.size)
    assert len({c.size for c in checkpoints}) == len(checkpoints)  # each size signed once
    assert check_log(audit_store, checkpoints, SIGNER.vkey, ORIGIN) == 48
    by_index = {leaf.index: leaf.data for leaf in audit_store.leaves(0, 100)}
    assert sorted(by_index.values()) == sorted(row.data for row in rows)
