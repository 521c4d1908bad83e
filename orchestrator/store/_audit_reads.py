"""Reads of the sequenced audit log: leaves, their indices, proofs from the stored perfect-subtree hashes,
checkpoints, and how far the log lags. ``AuditReadMethods`` answers the AuditService (an
``orchestrator.audit_log.ports.AuditLogReader``) and the metrics, each public method one transaction,
over helpers that join the caller's.

Only the sequenced prefix is read: an entry without an index is in no tree yet. A leaf, a stored
node and a checkpoint never change once written, so a proof read in several statements is one
tree's, however the sequencer moves on meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from decisionflow.transparency import (
    InvalidTreeRange,
    consistency_proof,
    consistency_ranges,
    inclusion_proof,
    inclusion_ranges,
    perfect_subtrees,
    subtree_hashes_of_nodes,
)
from decisionflow.vocabulary import CaseId, OperationId
from orchestrator.audit_log.ports import LoggedLeaf, PublishedCheckpoint
from orchestrator.audit_log.progress import AuditStatus
from orchestrator.schema import audit_checkpoints, audit_entries
from orchestrator.store._audit_tree import NodeLookup, nodes_txn, size_txn
from orchestrator.store._store_base import StoreBase

# Named in every query on the sequenced entries: the partial indexes that serve them hold no other.
_SEQUENCED = audit_entries.c.leaf_index.is_not(None)
_CHECKPOINTS: sa.Select[Any] = sa.select(
    audit_checkpoints.c.size,
    audit_checkpoints.c.root_hash,
    audit_checkpoints.c.signed_note,
    audit_checkpoints.c.signed_at,
)
# The newest first: the largest size, and among the signatures of one size (a rotated key) the latest.
_NEWEST = (audit_checkpoints.c.size.desc(), audit_checkpoints.c.signed_at.desc(), audit_checkpoints.c.key_id)


def _checkpoint_from(row: sa.Row[Any] | None) -> PublishedCheckpoint | None:
    if row is None:
        return None
    return PublishedCheckpoint(int(row.size), bytes(row.root_hash), str(row.signed_note), row.signed_at)


def latest_checkpoint_txn(conn: sa.Connection) -> PublishedCheckpoint | None:
    """The newest signed checkpoint, None before the first."""
    return _checkpoint_from(conn.execute(_CHECKPOINTS.order_by(*_NEWEST).limit(1)).first())


def checkpoint_txn(conn: sa.Connection, size: int) -> PublishedCheckpoint | None:
    """The newest checkpoint signed at exactly size, None when none was."""
    query = _CHECKPOINTS.where(audit_checkpoints.c.size == size).order_by(*_NEWEST).limit(1)
    return _checkpoint_from(conn.execute(query).first())


def leaves_txn(conn: sa.Connection, start: int, limit: int) -> list[LoggedLeaf]:
    """Up to limit sequenced leaves from index start, in index order."""
    if start < 0 or limit < 0:
        raise InvalidTreeRange(f"no leaves from index {start}, {limit} at most")
    rows = conn.execute(
        sa.select(audit_entries.c.leaf_index, audit_entries.c.leaf)
        .where(_SEQUENCED, audit_entries.c.leaf_index >= start, audit_entries.c.leaf_index < start + limit)
        .order_by(audit_entries.c.leaf_index)
    )
    return [LoggedLeaf(int(row.leaf_index), bytes(row.leaf)) for row in rows]


def leaf_indices_txn(conn: sa.Connection, operation_id: OperationId | None, case_id: CaseId | None) -> list[int]:
    """The indices of the sequenced leaves of operation_id and/or case_id (at least one given), ascending."""
    if operation_id is None and case_id is None:
        raise ValueError("name an operation id or a case id")
    query = sa.select(audit_entries.c.leaf_index).where(_SEQUENCED)
    if operation_id is not None:
        query = query.where(audit_entries.c.operation_id == operation_id)
    if case_id is not None:
        query = query.where(audit_entries.c.case_id == case_id)
    return [int(index) for index in conn.execute(query.order_by(audit_entries.c.leaf_index)).scalars()]


def _check_sequenced(conn: sa.Connection, size: int) -> None:
    sequenced = size_txn(conn)
    if size > sequenced:
        raise InvalidTreeRange(f"a tree of {size} leaves, but {sequenced} are sequenced")


def _proof(conn: sa.Connection, ranges: Sequence[tuple[int, int]]) -> NodeLookup:
    # Every stored node the proof's hashes fold, read in one statement.
    return NodeLookup(nodes_txn(conn, (node for start, end in ranges for node in perfect_subtrees(start, end))))


def inclusion_proof_txn(conn: sa.Connection, index: int, size: int) -> list[bytes]:
    """The RFC 9162 inclusion proof of leaf index in the tree of the first size leaves (size ≤ sequenced)."""
    ranges = inclusion_ranges(index, size)  # InvalidTreeRange unless 0 ≤ index < size
    _check_sequenced(conn, size)
    return inclusion_proof(index, size, subtree_hashes_of_nodes(_proof(conn, ranges)))


def consistency_proof_txn(conn: sa.Connection, old_size: int, new_size: int) -> list[bytes]:
    """The RFC 9162 consistency proof from the tree of old_size leaves to that of new_size (≤ sequenced)."""
    ranges = consistency_ranges(old_size, new_size)  # InvalidTreeRange unless 0 < old_size ≤ new_size
    _check_sequenced(conn, new_size)
    return consistency_proof(old_size, new_size, subtree_hashes_of_nodes(_proof(conn, ranges)))


def status_txn(conn: sa.Connection) -> AuditStatus:
    """The backlog, the size and the newest checkpoint, from aggregate reads (no leaf is read out)."""
    backlog = conn.execute(
        sa.select(sa.func.count(), sa.func.min(audit_entries.c.recorded_at)).where(audit_entries.c.leaf_index.is_(None))
    ).one()
    size = size_txn(conn)
    newest = latest_checkpoint_txn(conn)
    covered = 0 if newest is None else newest.size
    oldest_unsigned = conn.execute(
        sa.select(audit_entries.c.recorded_at).where(_SEQUENCED, audit_entries.c.leaf_index == covered)
    ).scalar_one_or_none()
    return AuditStatus(
        unsequenced=int(backlog[0]),
        oldest_unsequenced_at=backlog[1],
        size=size,
        checkpoint_size=covered,
        checkpoint_signed_at=None if newest is None else newest.signed_at,
        oldest_unsigned_at=oldest_unsigned,
    )


class AuditReadMethods(StoreBase):
    """Reads of the audit log: what the AuditService answers from (an ``AuditLogReader``) and the metrics report."""

    def audit_status(self) -> AuditStatus:
        """The sequencer's backlog and its age, the log's size and its newest checkpoint, read together."""
        with self.transactions.read() as conn:
            return status_txn(conn)

    def latest_checkpoint(self) -> PublishedCheckpoint | None:
        """The newest signed checkpoint of the audit log, None before the first is published."""
        with self.transactions.read() as conn:
            return latest_checkpoint_txn(conn)

    def checkpoint(self, size: int) -> PublishedCheckpoint | None:
        """The audit log's checkpoint published at exactly this size (the newest key's), None when none was."""
        with self.transactions.read() as conn:
            return checkpoint_txn(conn, size)

    def leaves(self, start: int, limit: int) -> Sequence[LoggedLeaf]:
        """Up to limit sequenced leaves of the audit log from index start, in index order."""
        with self.transactions.read() as conn:
            return leaves_txn(conn, start, limit)

    def leaf_indices(self, operation_id: OperationId | None = None, case_id: CaseId | None = None) -> Sequence[int]:
        """The indices of every sequenced leaf of an operation, or of every operation of a case (both given:
        of that operation if it is the case's), ascending; ValueError when neither is given."""
        with self.transactions.read() as conn:
            return leaf_indices_txn(conn, operation_id, case_id)

    def inclusion_proof(self, index: int, size: int) -> Sequence[bytes]:
        """RFC 9162 inclusion proof of leaf index in the tree of the first size leaves; InvalidTreeRange
        unless 0 ≤ index < size ≤ the sequenced size."""
        with self.transactions.read() as conn:
            return inclusion_proof_txn(conn, index, size)

    def consistency_proof(self, old_size: int, new_size: int) -> Sequence[bytes]:
        """RFC 9162 consistency proof between the trees of old_size and new_size leaves; InvalidTreeRange
        unless 0 < old_size ≤ new_size ≤ the sequenced size."""
        with self.transactions.read() as conn:
            return consistency_proof_txn(conn, old_size, new_size)
