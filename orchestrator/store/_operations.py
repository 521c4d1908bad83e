"""Operations: ``OperationMethods`` reads one, lists them for the reconciler, tallies them and settles
them by lookup, each public method one transaction, over helpers that join the caller's (ending in
``_txn``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from decisionflow.vocabulary import CaseId, LookupStatus, OperationId, OperationState
from orchestrator.audit_log.events import settlement_entry
from orchestrator.domain import Listing, Operation, OperationTally, Settlement
from orchestrator.errors import NotFound
from orchestrator.schema import cases, decisions, operations
from orchestrator.store import _audit_entries
from orchestrator.store import _statements as q
from orchestrator.store._columns import consistency_text, lookup_text, state_of, state_text, states_text
from orchestrator.store._rows import operation_from
from orchestrator.store._store_base import StoreBase


def operation_txn(conn: sa.Connection, operation_id: OperationId) -> Operation:
    """Return the operation (SUPERSEDED when pending and no longer current), or raise NotFound."""
    row = conn.execute(q.OPERATION_BY_ID, {"b_operation_id": operation_id}).first()
    if row is None:
        raise NotFound("operation", operation_id)
    return operation_from(row)


def _in_states(states: Sequence[OperationState]) -> sa.ColumnElement[bool]:
    """The condition "the operation is in one of states", as operation_from derives them: SUPERSEDED
    is not stored, it is a stored PENDING_REVIEW whose case has moved on to another proposal."""
    pending = operations.c.state == state_text(OperationState.PENDING_REVIEW)
    current = cases.c.current_operation_id == operations.c.operation_id
    conditions: list[sa.ColumnElement[bool]] = []
    stored = states_text(s for s in states if s not in (OperationState.PENDING_REVIEW, OperationState.SUPERSEDED))
    if stored:
        conditions.append(operations.c.state.in_(stored))
    if OperationState.PENDING_REVIEW in states:
        conditions.append(sa.and_(pending, current))
    if OperationState.SUPERSEDED in states:
        conditions.append(sa.and_(pending, sa.not_(current)))
    return sa.or_(sa.false(), *conditions)


def _listed(
    states: Sequence[OperationState], changed_before: datetime, case_id: CaseId | None
) -> list[sa.ColumnElement[bool]]:
    """The conditions of a listing of operations, its page key aside: what the listing and its count share."""
    conditions = [_in_states(states), operations.c.state_changed_at <= changed_before]
    if case_id is not None:
        conditions.append(operations.c.case_id == case_id)
    return conditions


def list_operations_txn(
    conn: sa.Connection,
    states: Sequence[OperationState],
    changed_before: datetime,
    limit: int,
    after: tuple[datetime, OperationId] | None,
    *,
    case_id: CaseId | None = None,
) -> list[Operation]:
    """Return operations in states that entered them before changed_before (only case_id's when given),
    oldest first, after a page key."""
    query = q.OPERATIONS.where(*_listed(states, changed_before, case_id))
    if after is not None:
        at, op = after
        query = query.where(
            sa.or_(
                operations.c.state_changed_at > at,
                sa.and_(operations.c.state_changed_at == at, operations.c.operation_id > op),
            )
        )
    query = query.order_by(operations.c.state_changed_at, operations.c.operation_id).limit(limit)
    return [operation_from(row) for row in conn.execute(query)]


def count_operations_txn(
    conn: sa.Connection, states: Sequence[OperationState], changed_before: datetime, *, case_id: CaseId | None = None
) -> int:
    """Return how many operations list_operations_txn lists with these filters, over every page.

    The join to cases is there only when the states need it (PENDING_REVIEW and SUPERSEDED are told
    apart by the case's current pointer): for stored states the count reads the (state,
    state_changed_at) index alone; see docs/console.md for its cost."""
    counted = sa.select(sa.func.count()).select_from(operations)
    if OperationState.PENDING_REVIEW in states or OperationState.SUPERSEDED in states:
        counted = sa.select(sa.func.count()).select_from(
            operations.outerjoin(cases, cases.c.case_id == operations.c.case_id)
        )
    return int(conn.execute(counted.where(*_listed(states, changed_before, case_id))).scalar_one())


def settle_txn(
    conn: sa.Connection, settlements: Sequence[Settlement], settled_by: str
) -> list[tuple[Operation | None, bool]]:
    """Record lookups: APPLIED with a receipt commits an open operation (one settlement leaf each, naming
    settled_by, the caller); every lookup is noted.

    Returns, per settlement, the operation as it now stands (None if unknown) and whether it settled.
    """
    ids = sorted({s.operation_id for s in settlements})
    # Lock the rows first, in one order, so concurrent reconcilers cannot both count the
    # same operation as settled (PostgreSQL re-checks the state after waiting) and cannot
    # deadlock on rows taken in different orders. SQLite's BEGIN IMMEDIATE serialises anyway.
    open_ids = set(
        conn.execute(
            sa.select(operations.c.operation_id)
            .where(operations.c.operation_id.in_(ids), operations.c.state.in_(q.OPEN))
            .order_by(operations.c.operation_id)
            .with_for_update()
        ).scalars()
    )
    commits: list[dict[str, object]] = []
    notes: list[dict[str, object]] = []
    settled_flags: list[bool] = []
    for s in settlements:
        values: dict[str, object] = {
            "b_operation_id": s.operation_id,
            "b_last_lookup_at": s.looked_up_at,
            "b_last_lookup_status": lookup_text(s.status),
            "b_last_lookup_consistency": consistency_text(s.consistency),
            "b_last_lookup_error": s.error or None,
        }
        receipt = s.receipt if s.status is LookupStatus.APPLIED else None
        settled = receipt is not None and s.operation_id in open_ids
        if receipt is not None and settled:
            open_ids.discard(s.operation_id)
            commits.append({**values, "b_receipt_id": receipt.receipt_id, "b_receipt_applied_at": receipt.applied_at})
        else:
            notes.append(values)
        settled_flags.append(settled)
    # One statement per kind, executed with many parameter sets: building a statement per
    # row cost more than the database work (a reconciler settles thousands per second).
    if commits:
        conn.execute(q.COMMIT_BY_LOOKUP, commits)
    if notes:
        conn.execute(q.NOTE_LOOKUP, notes)
    rows = conn.execute(q.OPERATIONS.where(operations.c.operation_id.in_(ids))).all()
    by_id = {operation.operation_id: operation for operation in map(operation_from, rows)}
    committed = [by_id[s.operation_id] for s, flag in zip(settlements, settled_flags, strict=True) if flag]
    _audit_entries.append_txn(conn, *(settlement_entry(operation, settled_by) for operation in committed))
    return [(by_id.get(s.operation_id), flag) for s, flag in zip(settlements, settled_flags, strict=True)]


def tally_txn(conn: sa.Connection) -> OperationTally:
    """Return the count of operations per state (SUPERSEDED derived as operation_from does) and the
    decision time of the oldest open one: two aggregate statements, no rows read out."""
    pending = operations.c.state == state_text(OperationState.PENDING_REVIEW)
    superseded = sa.and_(pending, cases.c.current_operation_id != operations.c.operation_id)
    state = sa.case((superseded, state_text(OperationState.SUPERSEDED)), else_=operations.c.state).label("state")
    counted = (
        sa.select(state, sa.func.count().label("n"))
        .select_from(operations)
        .outerjoin(cases, cases.c.case_id == operations.c.case_id)
        .group_by(state)
    )
    by_state = dict.fromkeys(OperationState, 0)
    for row in conn.execute(counted):
        by_state[state_of(row.state)] += int(row.n)
    oldest = conn.execute(
        sa.select(sa.func.min(decisions.c.decided_at))
        .select_from(operations)
        .join(decisions, decisions.c.operation_id == operations.c.operation_id)
        .where(operations.c.state.in_(q.OPEN))
    ).scalar_one_or_none()
    return OperationTally(by_state, oldest)


class OperationMethods(StoreBase):
    """Reading and settling operations."""

    def get_operation(self, operation_id: OperationId) -> Operation:
        """Return the operation with that id (SUPERSEDED when pending and no longer current), or raise NotFound."""
        with self.transactions.read() as conn:
            return operation_txn(conn, operation_id)

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
            return list_operations_txn(conn, states, changed_before, limit, after, case_id=case_id)

    def operations_listing(
        self,
        states: Sequence[OperationState],
        changed_before: datetime,
        limit: int,
        after: tuple[datetime, OperationId] | None,
        *,
        case_id: CaseId | None = None,
        counted: bool = False,
    ) -> Listing[Operation]:
        """Return list_operations' page and, when counted, how many operations its filters match over
        every page, both read from one snapshot."""
        with self.transactions.read(one_snapshot=counted) as conn:
            rows = list_operations_txn(conn, states, changed_before, limit, after, case_id=case_id)
            total = count_operations_txn(conn, states, changed_before, case_id=case_id) if counted else None
        return Listing(tuple(rows), total)

    def tally(self) -> OperationTally:
        """Return the operations per state and the decision time of the oldest open one, from one snapshot."""
        with self.transactions.read() as conn:
            return tally_txn(conn)

    def settle(self, settlements: Sequence[Settlement], *, settled_by: str) -> list[tuple[Operation | None, bool]]:
        """Record lookups in one transaction: APPLIED with a receipt commits an open operation (its
        settlement leaf names settled_by, the caller); every lookup is noted. Returns, per settlement, the
        operation (None if unknown) and whether it settled."""
        with self.transactions.write() as conn:
            return settle_txn(conn, settlements, settled_by)
