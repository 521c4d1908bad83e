"""The decision ledger and the effect record: ``LedgerMethods`` reads what Approve needs before
deciding, inserts the decision once, and records each attempt, receipt and rejection of the effect,
each public method one transaction, over helpers that join the caller's (ending in ``_txn``).

One decision row per operation, inserted once: the primary key decides races between replicas.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from decisionflow.vocabulary import OPEN_STATES, CaseId, Decision, OperationId, OperationState, Receipt
from orchestrator.audit_log.events import decision_entry, decision_leaf, effect_entry, effect_leaf, rejection_entry
from orchestrator.domain import DecisionInputs, FirstAttempt, Operation, RecordedDecision, SealedCheckpoint
from orchestrator.errors import NotFound, NotRedrivable, ReviewExpired, StaleProposal
from orchestrator.schema import decisions, operations
from orchestrator.store import _audit_entries, _operations
from orchestrator.store import _statements as q
from orchestrator.store._columns import decision_text, state_text
from orchestrator.store._reroute import ReviewRerouted
from orchestrator.store._rows import (
    decision_from,
    operation_from,
    operation_id_of,
    proposal_row_txn,
    review_from,
    sealed_checkpoint_from,
)
from orchestrator.store._store_base import StoreBase
from orchestrator.store._takeover import RECORD_ATTEMPT_OVER_ENDED

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


MAX_REJECTION_REASON_CHARS = 2000


class LedgerMethods(StoreBase):
    """The decision ledger and the effect record of each operation."""

    def decision_inputs(self, operation_id: OperationId) -> DecisionInputs:
        """Return the operation (with any recorded decision), its proposal, the case's current operation id
        and the pending review with its still-sealed checkpoint, read together; raise NotFound."""
        with self.transactions.read() as conn:
            row = conn.execute(q.DECISION_INPUTS, {"b_operation_id": operation_id}).first()
            if row is None:
                raise NotFound("operation", operation_id)
            m = row._mapping
            proposal = proposal_row_txn(conn, m, "p_")
        return DecisionInputs(
            operation=operation_from(row),
            proposal=proposal,
            current_operation_id=operation_id_of(m["current_operation_id"]),
            review=None if m["r_operation_id"] is None else review_from(m, "r_"),
            checkpoint=None if m["k_checkpoint_id"] is None else sealed_checkpoint_from(m, "k_"),
        )

    def record_decision(
        self,
        decided: RecordedDecision,
        case_id: CaseId,
        saved: Sequence[SealedCheckpoint],
        attempt: FirstAttempt | None = None,
        *,
        rerouted_at: datetime | None = None,
    ) -> Operation:
        """Insert the decision once, with the workflow's final checkpoints and, for an approval, its first
        attempt (UNKNOWN, under the attempt's lease: durable before Apply is sent); return the operation.

        Raise DecisionAlreadyRecorded when one exists, StaleProposal when the operation is no longer
        the case's current proposal (an existing decision wins over staleness), ReviewExpired when an
        operator expired its review first, ReviewRerouted when its review was re-routed after the
        deciding call read the operation (whose ``rerouted_at`` is given); each writes nothing.
        """
        if attempt is not None and decided.decision is not Decision.APPROVE:
            raise ValueError("only an approval has an attempt")
        state = OperationState.APPROVED if decided.decision is Decision.APPROVE else OperationState.DECLINED

        def work(conn: sa.Connection) -> Operation:
            try:
                with self.transactions.savepoint_txn(conn):
                    insert_decision_txn(conn, decided)
            except IntegrityError as exc:
                recorded = decision_txn(conn, decided.operation_id)
                if recorded is None:
                    raise  # some other constraint failed (an unknown operation); not a second decision
                raise DecisionAlreadyRecorded(recorded) from exc
            current = conn.execute(q.CURRENT_FOR_UPDATE, {"b_case_id": case_id}).scalar_one_or_none()
            if current != decided.operation_id:
                raise StaleProposal(decided.operation_id, current or "")
            # On PostgreSQL the decision's entry rides on the update (see _audit_entries); else it follows it.
            in_statement = _audit_entries.in_statement(conn)
            entry_values = _audit_entries.entry_values(decision_leaf(decided)) if in_statement else {}
            if attempt is None:
                row = conn.execute(
                    q.DECIDE_WITH_ENTRY if in_statement else q.DECIDE,
                    {
                        "b_operation_id": decided.operation_id,
                        "b_state": state_text(state),
                        "b_now": decided.decided_at,
                        "b_rerouted_at": rerouted_at,
                        **entry_values,
                    },
                ).first()
            else:
                row = conn.execute(
                    q.DECIDE_WITH_ATTEMPT_AND_ENTRY if in_statement else q.DECIDE_WITH_ATTEMPT,
                    {
                        "b_operation_id": decided.operation_id,
                        "b_now": decided.decided_at,
                        "b_payload": attempt.payload,
                        "b_digest": attempt.payload_digest,
                        "b_lease_until": attempt.lease_until,
                        "b_lease_holder": attempt.lease_holder,
                        "b_rerouted_at": rerouted_at,
                        **entry_values,
                    },
                ).first()
            if row is None:
                # Only a pending review is decided: an expiry or a re-route committed first (on PostgreSQL
                # this update waited for it and then found the row moved on).
                if (
                    conn.execute(q.STATE_BY_ID, {"b_operation_id": decided.operation_id}).scalar_one()
                    == q.PENDING_REVIEW
                ):
                    raise ReviewRerouted(decided.operation_id)
                raise ReviewExpired(decided.operation_id)
            operation = operation_from(row)
            if not in_statement:
                _audit_entries.append_txn(conn, decision_entry(decided, operation.case_id))
            self.checkpoints.insert_txn(conn, saved)
            return operation

        operation = self.transactions.batched(work)
        self._wrote(saved)
        return operation

    def get_decision(self, operation_id: OperationId) -> RecordedDecision | None:
        """Return the recorded decision of an operation, if any."""
        with self.transactions.read() as conn:
            return decision_txn(conn, operation_id)

    def record_attempt(
        self,
        operation_id: OperationId,
        payload: bytes,
        digest: str,
        now: datetime,
        lease_until: datetime,
        *,
        holder: str | None = None,
        ended_holder: str | None = None,
    ) -> Operation:
        """Durably note an Apply about to be sent (state UNKNOWN until the receiver answers), holding
        the operation until lease_until in holder's name; raise NotRedrivable unless the operation is
        APPROVED or UNKNOWN, AttemptInFlight while another attempt's lease holds it (a lease held in
        ended_holder's name, a holder known to have ended, is taken over).

        The payload is stored on the first attempt and reused by every later one.
        """
        statement = q.RECORD_ATTEMPT if ended_holder is None else RECORD_ATTEMPT_OVER_ENDED

        def work(conn: sa.Connection) -> Operation:
            row = conn.execute(
                statement,
                {
                    "b_operation_id": operation_id,
                    "b_now": now,
                    "b_payload": payload,
                    "b_digest": digest,
                    "b_lease_until": lease_until,
                    "b_lease_holder": holder,
                    "b_ended_holder": ended_holder,
                },
            ).first()
            if row is not None:
                return operation_from(row)
            operation = _operations.operation_txn(conn, operation_id)
            if operation.state in OPEN_STATES:
                raise AttemptInFlight(operation)
            raise NotRedrivable(operation_id, operation.state)

        return self.transactions.batched(work)

    def release_attempt(self, operation_id: OperationId, lease_until: datetime) -> Operation:
        """Give up the lease an attempt took until lease_until (if it still holds it); return the operation."""

        def work(conn: sa.Connection) -> Operation:
            conn.execute(q.RELEASE_ATTEMPT, {"b_operation_id": operation_id, "b_lease_until": lease_until})
            return _operations.operation_txn(conn, operation_id)

        return self.transactions.batched(work)

    def record_receipt(self, operation_id: OperationId, receipt: Receipt, now: datetime) -> Operation:
        """Move an open operation to COMMITTED with the receiver's receipt (a second receipt is ignored)."""

        def work(conn: sa.Connection) -> Operation:
            # On PostgreSQL the receipt's entry rides on the update (see _audit_entries); else it follows it.
            in_statement = _audit_entries.in_statement(conn)
            values: dict[str, object] = {
                "b_operation_id": operation_id,
                "b_now": now,
                "b_receipt_id": receipt.receipt_id,
                "b_applied_at": receipt.applied_at,
            }
            if in_statement:
                values.update(_audit_entries.entry_values(effect_leaf(now, operation_id, receipt)))
            row = conn.execute(q.RECORD_RECEIPT_WITH_ENTRY if in_statement else q.RECORD_RECEIPT, values).first()
            if row is None:
                # The operation was settled already (or is unknown): nothing changed; report it as it stands.
                return _operations.operation_txn(conn, operation_id)
            operation = operation_from(row)
            if not in_statement:
                _audit_entries.append_txn(conn, effect_entry(operation))
            return operation

        return self.transactions.batched(work)

    def record_rejection(self, operation_id: OperationId, reason: str, now: datetime) -> Operation:
        """Move an open operation to REJECTED: the receiver definitely refused the effect."""

        def work(conn: sa.Connection) -> Operation:
            rejected = conn.execute(
                operations.update()
                .where(operations.c.operation_id == operation_id, operations.c.state.in_(q.OPEN))
                .values(
                    state=state_text(OperationState.REJECTED),
                    state_changed_at=now,
                    rejection_reason=reason[:MAX_REJECTION_REASON_CHARS],
                    attempt_lease_until=None,
                    attempt_lease_holder=None,
                )
            ).rowcount
            operation = _operations.operation_txn(conn, operation_id)
            if rejected:
                _audit_entries.append_txn(conn, rejection_entry(operation))
            return operation

        return self.transactions.batched(work)
