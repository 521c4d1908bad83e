"""The checkpoints table: sealed workflow checkpoints, written in the caller's transaction.

Sealing and verification live in ``orchestrator.checkpoints``; this module only stores rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from orchestrator.domain import SealedCheckpoint
from orchestrator.schema import checkpoints
from orchestrator.store._rows import sealed_checkpoint_from
from orchestrator.store._transactions import Transactions


class CheckpointTable:
    """SQL access to the checkpoints table."""

    def __init__(self, transactions: Transactions) -> None:
        self._transactions = transactions

    def insert_txn(self, conn: sa.Connection, rows: Sequence[SealedCheckpoint]) -> None:
        """Insert sealed checkpoints inside the caller's transaction."""
        if rows:
            conn.execute(
                checkpoints.insert(),
                [
                    {
                        "checkpoint_id": r.checkpoint_id,
                        "workflow_name": r.workflow_name,
                        "graph_signature": r.graph_signature,
                        "operation_id": r.operation_id,
                        "created_at": r.created_at,
                        "key_id": r.key_id,
                        "mac": r.mac,
                        "state": r.state,
                    }
                    for r in rows
                ],
            )

    def get(self, checkpoint_id: str) -> SealedCheckpoint | None:
        """Return the stored checkpoint with that id, still sealed."""
        with self._transactions.read() as conn:
            row = conn.execute(sa.select(checkpoints).where(checkpoints.c.checkpoint_id == checkpoint_id)).first()
        return None if row is None else sealed_checkpoint_from(row._mapping)
