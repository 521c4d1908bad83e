"""Operator maintenance on the orchestrator database: pruning checkpoints, expiring abandoned reviews and
re-opening reviews.

Each method is one transaction. Proposals, decisions and receipts are never deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from decisionflow.vocabulary import CaseId, OperationId, OperationState
from decisionflow_server.storage.transactions import Transactions
from orchestrator.audit_log.events import expiry_entry
from orchestrator.domain import PendingReview, SealedCheckpoint
from orchestrator.schema import cases, checkpoints, decisions, operations, pending_reviews
from orchestrator.store import _audit_entries
from orchestrator.store._checkpoints import CheckpointTable, checkpoint_columns
from orchestrator.store._columns import state_text, states_text
from orchestrator.store._rows import review_from, sealed_checkpoint_from

SETTLED_STATES = (
    OperationState.COMMITTED,
    OperationState.DECLINED,
    OperationState.REJECTED,
    OperationState.EXPIRED,
)
_PENDING = state_text(OperationState.PENDING_REVIEW)


class Housekeeping:
    """Pruning and re-opening, on the store's transactions."""

    def __init__(self, transactions: Transactions, checkpoint_table: CheckpointTable) -> None:
        self._transactions = transactions
        self._checkpoints = checkpoint_table

    def prune_checkpoints(self, cutoff: datetime, *, dry_run: bool) -> int:
        """Delete (or count, on a dry run) the checkpoints of operations settled before cutoff, and of
        undecided proposals superseded on a case that has not moved since cutoff.

        The case's current pending review is never touched. A superseded proposal made current again
        by an edit gets a fresh checkpoint then (see create_edit), so none is ever resumed from a
        pruned one.
        """
        settled = sa.select(operations.c.operation_id).where(
            operations.c.state.in_(states_text(SETTLED_STATES)), operations.c.state_changed_at < cutoff
        )
        superseded = (
            sa.select(operations.c.operation_id)
            .join(cases, cases.c.case_id == operations.c.case_id)
            .where(
                operations.c.state == state_text(OperationState.PENDING_REVIEW),
                cases.c.current_operation_id != operations.c.operation_id,
                cases.c.updated_at < cutoff,
            )
        )
        of_settled = sa.or_(checkpoints.c.operation_id.in_(settled), checkpoints.c.operation_id.in_(superseded))
        with self._transactions.write() as conn:
            if dry_run:
                return int(
                    conn.execute(sa.select(sa.func.count()).select_from(checkpoints).where(of_settled)).scalar_one()
                )
            return int(conn.execute(checkpoints.delete().where(of_settled)).rowcount)

    def expire_reviews(self, cutoff: datetime, now: datetime, *, dry_run: bool) -> int:
        """Move (or count, on a dry run) every undecided current proposal whose case has not moved since
        cutoff to EXPIRED, at now; return how many.

        The case's pointer moves whenever a proposal becomes current, so "has not moved since cutoff" is
        "nobody started, replaced or edited it since". A proposal already superseded is left alone: it is
        in nobody's inbox and can never be decided. Against a concurrent Approve, the state decides: the
        update takes only rows still PENDING_REVIEW, and a decision takes only a row not yet EXPIRED
        (record_decision); on PostgreSQL whichever writes the row second re-reads it and finds it moved on.
        """
        # An alias, so that the subquery of the UPDATE below is not correlated to the table it updates.
        candidate = operations.alias("candidate")
        abandoned = (
            sa.select(candidate.c.operation_id)
            .join(
                cases,
                sa.and_(
                    cases.c.case_id == candidate.c.case_id,
                    cases.c.current_operation_id == candidate.c.operation_id,
                ),
            )
            .where(candidate.c.state == _PENDING, cases.c.updated_at < cutoff)
        )
        with self._transactions.write() as conn:
            if dry_run:
                return int(conn.execute(sa.select(sa.func.count()).select_from(abandoned.subquery())).scalar_one())
            rows = conn.execute(
                operations.update()
                .where(operations.c.operation_id.in_(abandoned), operations.c.state == _PENDING)
                .values(state=state_text(OperationState.EXPIRED), state_changed_at=now)
                .returning(operations.c.operation_id, operations.c.case_id)
            ).all()
            # In operation id order: the same expiries write their leaves in the same order on every database.
            expired = sorted(rows, key=lambda row: str(row.operation_id))
            entries = (expiry_entry(OperationId(row.operation_id), CaseId(row.case_id), now) for row in expired)
            _audit_entries.append_txn(conn, *entries)
            return len(expired)

    def reviews_outside(self, name: str, version: str, graph_signature: str) -> list[PendingReview]:
        """Return undecided pending reviews recorded under another workflow name, version or graph."""
        query = (
            sa.select(pending_reviews)
            .join(operations, operations.c.operation_id == pending_reviews.c.operation_id)
            .where(
                operations.c.state == state_text(OperationState.PENDING_REVIEW),
                sa.or_(
                    pending_reviews.c.workflow_name != name,
                    pending_reviews.c.workflow_version != version,
                    pending_reviews.c.graph_signature != graph_signature,
                ),
            )
            .order_by(pending_reviews.c.created_at)
        )
        with self._transactions.read() as conn:
            return [review_from(r._mapping) for r in conn.execute(query)]

    def pending_checkpoints(self, limit: int) -> list[SealedCheckpoint]:
        """Return the checkpoints undecided pending reviews resume from, oldest review first, at most limit."""
        query = (
            sa.select(*checkpoint_columns())
            .join(pending_reviews, pending_reviews.c.checkpoint_id == checkpoints.c.checkpoint_id)
            .join(operations, operations.c.operation_id == pending_reviews.c.operation_id)
            .where(operations.c.state == state_text(OperationState.PENDING_REVIEW))
            .order_by(pending_reviews.c.created_at)
            .limit(limit)
        )
        with self._transactions.read() as conn:
            return [sealed_checkpoint_from(r._mapping) for r in conn.execute(query)]

    def reopen(self, old: PendingReview, new: PendingReview, saved: Sequence[SealedCheckpoint]) -> bool:
        """Point an undecided pending review at a checkpoint of the running workflow; retire the old one.

        Returns False (and changes nothing) if the review was decided or re-opened meanwhile.
        """
        with self._transactions.write() as conn:
            moved = conn.execute(
                pending_reviews.update()
                .where(
                    pending_reviews.c.operation_id == old.operation_id,
                    pending_reviews.c.checkpoint_id == old.checkpoint_id,
                    ~sa.exists().where(decisions.c.operation_id == old.operation_id),
                )
                .values(
                    workflow_name=new.workflow_name,
                    workflow_version=new.workflow_version,
                    graph_signature=new.graph_signature,
                    checkpoint_id=new.checkpoint_id,
                    retired_checkpoint_id=old.checkpoint_id,
                )
            ).rowcount
            if moved != 1:
                return False
            self._checkpoints.insert_txn(conn, saved)
        return True
