"""The decision ledger: one row per operation, inserted once; the primary key decides races
between replicas (joining a caller's transaction)."""

from __future__ import annotations

import sqlalchemy as sa

from decisionflow.vocabulary import OperationId
from orchestrator.domain import Operation, RecordedDecision
from orchestrator.schema import decisions
from orchestrator.store._columns import decision_text
from orchestrator.store._rows import decision_from

_INSERT_DECISION = decisions.insert()  # built once (see orchestrator.store._statements)
_DECISION = sa.select(decisions).where(decisions.c.operation_id == sa.bindparam("b_operation_id"))


class DecisionAlreadyRecorded(Exception):
    """The ledger already holds a decision for the operation (carried as ``recorded``)."""

    def __init__(self, recorded: RecordedDecision) -> None:
        super().__init__(f"{recorded.operation_id} already decided: {recorded.decision}")
        self.recorded = recorded


class AttemptInFlight(Exception):
    """Another attempt's lease holds the operation (carried as ``operation``, with the lease's end)."""

    def __init__(self, operation: Operation) -> None:
        super().__init__(f"{operation.operation_id} has an attempt in flight until {operation.attempt_lease_until}")
        self.operation = operation


def insert_decision_txn(conn: sa.Connection, decided: RecordedDecision) -> None:
    """Insert the decision; an IntegrityError here may mean one is already recorded."""
    conn.execute(
        _INSERT_DECISION,
        {
            "operation_id": decided.operation_id,
            "decision": decision_text(decided.decision),
            "reviewer": decided.reviewer,
            "decided_at": decided.decided_at,
        },
    )


def decision_txn(conn: sa.Connection, operation_id: OperationId) -> RecordedDecision | None:
    """Return the recorded decision of an operation, if any."""
    row = conn.execute(_DECISION, {"b_operation_id": operation_id}).first()
    return None if row is None else decision_from(row._mapping)
