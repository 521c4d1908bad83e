"""OrchestratorStore's operations: reading one, the reconciler's listing, the tally, and settling by lookup."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from decisionflow.vocabulary import CaseId, OperationId, OperationState
from orchestrator.domain import Operation, OperationTally, Settlement
from orchestrator.store import _operations
from orchestrator.store._store_base import StoreBase


class OperationMethods(StoreBase):
    """Reading and settling operations."""

    def get_operation(self, operation_id: OperationId) -> Operation:
        """Return the operation with that id (SUPERSEDED when pending and no longer current), or raise NotFound."""
        with self.transactions.read() as conn:
            return _operations.operation_txn(conn, operation_id)

    def list_operations(
        self,
        states: Sequence[OperationState],
        changed_before: datetime,
        limit: int,
        after: tuple[datetime, OperationId] | None,
        *,
        case_id: CaseId | None = None,
    ) -> list[Operation]:
        """Return operations in states that entered them before changed_before (only case_id's when given),
        oldest first, after a page key."""
        with self.transactions.read() as conn:
            return _operations.list_operations_txn(conn, states, changed_before, limit, after, case_id=case_id)

    def tally(self) -> OperationTally:
        """Return the operations per state and the decision time of the oldest open one, from one snapshot."""
        with self.transactions.read() as conn:
            return _operations.tally_txn(conn)

    def settle(self, settlements: Sequence[Settlement], *, settled_by: str) -> list[tuple[Operation | None, bool]]:
        """Record lookups in one transaction: APPLIED with a receipt commits an open operation (its
        settlement leaf names settled_by, the caller); every lookup is noted. Returns, per settlement, the
        operation (None if unknown) and whether it settled."""
        with self.transactions.write() as conn:
            return _operations.settle_txn(conn, settlements, settled_by)
