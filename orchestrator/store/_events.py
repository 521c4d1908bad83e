"""Reads of the event feed (orchestrator.events): the sequenced leaves from an index with the ids and the
action they are found by, whether entries wait for the sequencer, and which case a watching author may see.
Each public method is one read transaction."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from decisionflow.vocabulary import CaseId, OperationId
from orchestrator.audit_log.feed import StoredEvent
from orchestrator.schema import audit_entries, proposals
from orchestrator.store._audit_tree import size_txn
from orchestrator.store._store_base import StoreBase

# Every leaf's operation is a proposal's: the action is the proposal's, read beside the leaf.
_EVENTS = (
    sa.select(
        audit_entries.c.leaf_index,
        audit_entries.c.leaf,
        audit_entries.c.kind,
        audit_entries.c.operation_id,
        audit_entries.c.case_id,
        proposals.c.action,
    )
    .select_from(audit_entries.outerjoin(proposals, proposals.c.operation_id == audit_entries.c.operation_id))
    .where(audit_entries.c.leaf_index.is_not(None))
)
# The sequencer's queue, read through its own partial index.
_WAITING = sa.select(sa.literal(1)).where(audit_entries.c.leaf_index.is_(None)).limit(1)


class EventReadMethods(StoreBase):
    """The event feed's reads of the audit log."""

    def log_size(self) -> int:
        """The number of sequenced leaves (the index the next one gets)."""
        with self.transactions.read() as conn:
            return size_txn(conn)

    def has_unsequenced(self) -> bool:
        """Whether an entry waits for the sequencer (read only: a pass with nothing to do takes no lock)."""
        with self.transactions.read() as conn:
            return conn.execute(_WAITING).first() is not None

    def feed_position(self) -> tuple[int, bool]:
        """The log's size and whether an entry waits for the sequencer, in one read transaction (the feed's
        pass when nothing happened costs this alone)."""
        with self.transactions.read() as conn:
            return size_txn(conn), conn.execute(_WAITING).first() is not None

    def events(self, start: int, limit: int) -> Sequence[StoredEvent]:
        """Up to limit sequenced leaves from index start, in index order, each with its ids and action."""
        with self.transactions.read() as conn:
            rows = conn.execute(
                _EVENTS.where(audit_entries.c.leaf_index >= start, audit_entries.c.leaf_index < start + limit).order_by(
                    audit_entries.c.leaf_index
                )
            )
            return [
                StoredEvent(
                    int(row.leaf_index),
                    bytes(row.leaf),
                    str(row.kind),
                    OperationId(row.operation_id),
                    CaseId(row.case_id),
                    "" if row.action is None else str(row.action),
                )
                for row in rows
            ]

    def case_of_author(self, principal: str, case_id: CaseId | None, operation_id: OperationId | None) -> CaseId | None:
        """The case named (by case_id, or by the case of operation_id; both given: they must agree) when
        principal created a proposal of it, else None."""
        with self.transactions.read() as conn:
            if operation_id is not None:
                found = conn.execute(
                    sa.select(proposals.c.case_id).where(proposals.c.operation_id == operation_id)
                ).scalar_one_or_none()
                if found is None or (case_id is not None and found != case_id):
                    return None
                case_id = CaseId(found)
            if case_id is None:
                return None
            authored = conn.execute(
                sa.select(sa.literal(1))
                .where(proposals.c.case_id == case_id, proposals.c.created_by == principal)
                .limit(1)
            ).first()
            return case_id if authored is not None else None
