"""Statements of the hot paths (StartReview, Approve, settle), built once.

A statement built per call is compiled from the cache but still pays for its construction
and cache key, which cost more than SQLite's work.
"""

from __future__ import annotations

import sqlalchemy as sa

from decisionflow.vocabulary import OPEN_STATES, OperationState
from decisionflow_server.storage.db import UtcDateTime
from decisionflow_server.storage.qualified import qualified
from orchestrator.schema import cases, checkpoints, decisions, operations, pending_reviews, proposals
from orchestrator.store._audit_entries import with_entry
from orchestrator.store._checkpoints import checkpoint_columns
from orchestrator.store._columns import state_text, states_text

OPEN = states_text(OPEN_STATES)

# Typed binds: a bare bindparam inside case() or coalesce() would reach the driver untyped.
_NOW = sa.bindparam("b_now", type_=UtcDateTime())
_OPERATION_ID: sa.BindParameter[str] = sa.bindparam("b_operation_id")
_CASE_ID: sa.BindParameter[str] = sa.bindparam("b_case_id")
PENDING_REVIEW = state_text(OperationState.PENDING_REVIEW)

# StartReview's: the new proposal's rows, and the case's current proposal with its compare-and-set.
INSERT_PROPOSAL = proposals.insert()
INSERT_OPERATION = operations.insert()
INSERT_REVIEW = pending_reviews.insert()
INSERT_CASE = cases.insert()
PROPOSAL_BY_ID = sa.select(proposals).where(proposals.c.operation_id == _OPERATION_ID)
REVIEW_BY_ID = sa.select(pending_reviews).where(pending_reviews.c.operation_id == _OPERATION_ID)
STATE_BY_ID = sa.select(operations.c.state).where(operations.c.operation_id == _OPERATION_ID)
CURRENT_OF_CASE = sa.select(cases.c.current_operation_id).where(cases.c.case_id == _CASE_ID)
MOVE_CURRENT = (
    cases.update()
    .where(cases.c.case_id == _CASE_ID, cases.c.current_operation_id == sa.bindparam("b_expected"))
    .values(current_operation_id=sa.bindparam("b_new"), updated_at=_NOW)
)

OPERATIONS = (
    sa.select(
        operations,
        decisions.c.decision,
        decisions.c.reviewer,
        decisions.c.decided_at,
        cases.c.current_operation_id,
    )
    .select_from(operations)
    .outerjoin(decisions, decisions.c.operation_id == operations.c.operation_id)
    .outerjoin(cases, cases.c.case_id == operations.c.case_id)
)
OPERATION_BY_ID = OPERATIONS.where(operations.c.operation_id == _OPERATION_ID)
# The operation and the digest of the rule its review follows (NULL: the default rule), in one statement.
OPERATION_AND_RULE_BY_ID = (
    OPERATIONS.add_columns(proposals.c.rule_digest)
    .outerjoin(proposals, proposals.c.operation_id == operations.c.operation_id)
    .where(operations.c.operation_id == _OPERATION_ID)
)


# OPERATIONS's columns as an UPDATE of one operation returns them: the row as the update left it,
# read in the same statement instead of a second one (a statement costs more here than SQLite's
# work), with the decision (write-once) and the case's current proposal beside it. The subqueries
# are qualified(): SQLite's RETURNING would otherwise render their correlation without table names,
# matching every row (decisionflow_server.storage.qualified).
_DECISION_OF_ROW = decisions.c.operation_id == operations.c.operation_id
OPERATION_RETURNING = (
    *operations.c,
    *(
        qualified(sa.select(c).where(_DECISION_OF_ROW).scalar_subquery()).label(c.name)
        for c in (decisions.c.decision, decisions.c.reviewer, decisions.c.decided_at)
    ),
    qualified(
        sa.select(cases.c.current_operation_id).where(cases.c.case_id == operations.c.case_id).scalar_subquery()
    ).label("current_operation_id"),
)

# Everything Approve reads before deciding, in one statement: the operation with any recorded
# decision and the case's current proposal, the proposal, the pending review and its checkpoint.
DECISION_INPUTS = (
    OPERATIONS.add_columns(
        *(c.label(f"p_{c.name}") for c in proposals.c),
        *(c.label(f"r_{c.name}") for c in pending_reviews.c),
        *checkpoint_columns("k_"),
    )
    .join(proposals, proposals.c.operation_id == operations.c.operation_id)
    .outerjoin(pending_reviews, pending_reviews.c.operation_id == operations.c.operation_id)
    .outerjoin(checkpoints, checkpoints.c.checkpoint_id == pending_reviews.c.checkpoint_id)
    .where(operations.c.operation_id == _OPERATION_ID)
)
CURRENT_FOR_UPDATE = CURRENT_OF_CASE.with_for_update()
# Only a pending review is decided: an expired one (expire-reviews) is not, and no row comes back; nor is
# one re-routed since the deciding call read it (reroute-reviews), which must decide it again.
_PENDING_ONLY = (
    operations.c.operation_id == _OPERATION_ID,
    operations.c.state == PENDING_REVIEW,
    operations.c.rerouted_at.is_not_distinct_from(sa.bindparam("b_rerouted_at", type_=UtcDateTime())),
)
DECIDE = (
    operations.update()
    .where(*_PENDING_ONLY)
    .values(state=sa.bindparam("b_state"), state_changed_at=_NOW)
    .returning(*OPERATION_RETURNING)
)
_OPEN_ONLY = (operations.c.operation_id == _OPERATION_ID, operations.c.state.in_(OPEN))
_LEASE_UNTIL = sa.bindparam("b_lease_until", type_=UtcDateTime())
# An attempt may start only when no other attempt holds the operation: no lease, or one that has
# passed (its holder finished without releasing it, or crashed).
_LEASE_FREE = sa.or_(operations.c.attempt_lease_until.is_(None), operations.c.attempt_lease_until <= _NOW)
_ATTEMPT = {
    "attempt_lease_until": _LEASE_UNTIL,
    "attempt_lease_holder": sa.bindparam("b_lease_holder"),
    "state": state_text(OperationState.UNKNOWN),
    "attempts": operations.c.attempts + 1,
    "first_attempt_at": sa.func.coalesce(operations.c.first_attempt_at, _NOW, type_=UtcDateTime()),
    "last_attempt_at": _NOW,
    "payload": sa.func.coalesce(operations.c.payload, sa.bindparam("b_payload")),
    "payload_digest": sa.func.coalesce(operations.c.payload_digest, sa.bindparam("b_digest")),
}
RECORD_ATTEMPT = (
    operations.update()
    .where(*_OPEN_ONLY, _LEASE_FREE)
    .values(
        state_changed_at=sa.case(
            (operations.c.state == state_text(OperationState.UNKNOWN), operations.c.state_changed_at), else_=_NOW
        ),
        **_ATTEMPT,
    )
    .returning(*OPERATION_RETURNING)
)
# An approval with its first attempt, in one statement: what DECIDE then RECORD_ATTEMPT would leave
# (the operation was pending review, so no lease holds it and it enters UNKNOWN now).
DECIDE_WITH_ATTEMPT = (
    operations.update().where(*_PENDING_ONLY).values(state_changed_at=_NOW, **_ATTEMPT).returning(*OPERATION_RETURNING)
)
RECORD_RECEIPT = (
    operations.update()
    .where(*_OPEN_ONLY)
    .values(
        state=state_text(OperationState.COMMITTED),
        state_changed_at=_NOW,
        receipt_id=sa.bindparam("b_receipt_id"),
        receipt_applied_at=sa.bindparam("b_applied_at"),
        attempt_lease_until=None,
        attempt_lease_holder=None,
    )
    .returning(*OPERATION_RETURNING)
)
# The holder of a lease gives it up (its Apply ended without a settled answer); a lease that has
# passed and been taken by another caller is not this holder's to release.
RELEASE_ATTEMPT = (
    operations.update()
    .where(operations.c.operation_id == _OPERATION_ID, operations.c.attempt_lease_until == _LEASE_UNTIL)
    .values(attempt_lease_until=None, attempt_lease_holder=None)
)

_LOOKUP_NOTE_VALUES: dict[str, sa.BindParameter[object]] = {
    name: sa.bindparam(f"b_{name}")
    for name in ("last_lookup_at", "last_lookup_status", "last_lookup_consistency", "last_lookup_error")
}
# Executed with many parameter sets by settle(); rows are locked and known open beforehand.
NOTE_LOOKUP = operations.update().where(operations.c.operation_id == _OPERATION_ID).values(_LOOKUP_NOTE_VALUES)
COMMIT_BY_LOOKUP = (
    operations.update()
    .where(operations.c.operation_id == _OPERATION_ID)
    .values(
        state=state_text(OperationState.COMMITTED),
        state_changed_at=sa.bindparam("b_last_lookup_at"),
        receipt_id=sa.bindparam("b_receipt_id"),
        receipt_applied_at=sa.bindparam("b_receipt_applied_at"),
        attempt_lease_until=None,
        attempt_lease_holder=None,
        **_LOOKUP_NOTE_VALUES,
    )
)

# On PostgreSQL, the statements that record a decision or a receipt, each inserting its event's audit entry
# too (without a round trip of its own) iff the update changes the row.
DECIDE_WITH_ENTRY = with_entry(DECIDE, "decision")
DECIDE_WITH_ATTEMPT_AND_ENTRY = with_entry(DECIDE_WITH_ATTEMPT, "decision")
RECORD_RECEIPT_WITH_ENTRY = with_entry(RECORD_RECEIPT, "effect")
