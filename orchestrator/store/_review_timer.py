"""What the review timer (orchestrator.review_timer) writes: the escalation of a stage past its due time
and the expiry of a review past its rule's deadline, each decided in the transaction that writes it.

``reviews_under_rules`` pages through the open reviews under a rule other than the default one.
``act_on_time`` then takes one of them under the same per-operation lock a vote takes
(orchestrator.store._votes), reads its rule, votes and escalations, and asks ``review_progress`` where
it stands at now:

    past its deadline, no decision recorded    -> EXPIRED at now, with its ``expiry`` leaf
    its stage due and escalating, not yet      -> an escalations row at now, with its ``escalation`` leaf
    anything else                              -> nothing written

So a vote and the timer never both act on one review's stale state: the one that takes the lock second
reads what the first wrote. The escalation's key (operation, stage) only guards against a bug.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from decisionflow.review_rules import Escalation, ReviewProgress, review_progress
from decisionflow.transparency import EscalationLeaf
from decisionflow.vocabulary import CaseId, OperationId, OperationState
from orchestrator.audit_log.events import AuditEntry, expiry_entry
from orchestrator.schema import decisions, escalations, operations, proposals
from orchestrator.store import _audit_entries
from orchestrator.store import _statements as q
from orchestrator.store._columns import state_text
from orchestrator.store._proposals import proposal_txn
from orchestrator.store._store_base import StoreBase
from orchestrator.store._votes import escalations_txn, review_record, votes_txn

_OPERATION_ID: sa.BindParameter[str] = sa.bindparam("b_operation_id")
_LOCK_OPERATION = sa.select(operations.c.state).where(operations.c.operation_id == _OPERATION_ID).with_for_update()
_DECIDED = sa.select(sa.exists().where(decisions.c.operation_id == _OPERATION_ID))
_INSERT_ESCALATION = escalations.insert()
_EXPIRE = (
    operations.update()
    .where(operations.c.operation_id == _OPERATION_ID, operations.c.state == q.PENDING_REVIEW)
    .values(state=state_text(OperationState.EXPIRED), state_changed_at=sa.bindparam("b_now"))
)


class TimedAct(enum.StrEnum):
    """What the timer wrote for one review."""

    ESCALATED = "escalated"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class TimerVisit:
    """One open review the timer read: its case, where it stood at the time used, and what was written
    (None: nothing; the review was decided, expired or not due meanwhile, or needs nothing yet)."""

    operation_id: OperationId
    case_id: CaseId
    progress: ReviewProgress | None
    act: TimedAct | None


def escalation_entry(
    operation_id: OperationId, case_id: CaseId, escalation: Escalation, groups: tuple[str, ...]
) -> AuditEntry:
    """The audit entry of a stage escalated to groups."""
    leaf = EscalationLeaf(escalation.at, operation_id, escalation.stage_index, groups)
    return AuditEntry.of(leaf, "escalation", case_id)


class ReviewTimerMethods(StoreBase):
    """The reads and writes of the review timer."""

    def reviews_under_rules(self, after: OperationId | None, limit: int) -> tuple[OperationId, ...]:
        """Return up to limit open reviews (PENDING_REVIEW) under a rule other than the default one, in
        operation id order, after the id given (None: from the first)."""
        query = (
            sa.select(operations.c.operation_id)
            .join(proposals, proposals.c.operation_id == operations.c.operation_id)
            .where(operations.c.state == q.PENDING_REVIEW, proposals.c.rule_digest.is_not(None))
            .order_by(operations.c.operation_id)
            .limit(limit)
        )
        if after is not None:
            query = query.where(operations.c.operation_id > after)
        with self.transactions.read() as conn:
            return tuple(OperationId(row.operation_id) for row in conn.execute(query))

    def act_on_time(self, operation_id: OperationId, now: datetime) -> TimerVisit:
        """Expire the review when its deadline has passed without a decision, else escalate its current stage
        when due and not escalated yet (see the module docstring), with the audit leaf, in one transaction
        serialised with the operation's votes. Raises NotFound for an unknown operation."""
        with self.transactions.write() as conn:
            state = conn.execute(_LOCK_OPERATION, {"b_operation_id": operation_id}).scalar_one_or_none()
            proposal = proposal_txn(conn, operation_id)
            if state != q.PENDING_REVIEW or proposal.rule is None:
                return TimerVisit(operation_id, proposal.case_id, None, None)
            recorded = votes_txn(conn, operation_id)
            # The timer's time never goes before a vote it reads (replicas' clocks differ a little).
            at = max([now, *(vote.at for vote in recorded)])
            record = review_record(proposal, recorded, escalations_txn(conn, operation_id))
            progress = review_progress(record, at)
            if progress.past_deadline:
                if conn.execute(_DECIDED, {"b_operation_id": operation_id}).scalar_one():
                    return TimerVisit(operation_id, proposal.case_id, progress, None)
                conn.execute(_EXPIRE, {"b_operation_id": operation_id, "b_now": at})
                _audit_entries.append_txn(conn, expiry_entry(operation_id, proposal.case_id, at))
                return TimerVisit(operation_id, proposal.case_id, progress, TimedAct.EXPIRED)
            if not progress.should_escalate:
                return TimerVisit(operation_id, proposal.case_id, progress, None)
            escalation = Escalation(progress.stage_index, at)
            conn.execute(
                _INSERT_ESCALATION,
                {"operation_id": operation_id, "stage_index": escalation.stage_index, "escalated_at": at},
            )
            groups = progress.current.stage.escalate_to
            _audit_entries.append_txn(conn, escalation_entry(operation_id, proposal.case_id, escalation, groups))
            escalated = review_progress(dataclasses.replace(record, escalations=(*record.escalations, escalation)), at)
            return TimerVisit(operation_id, proposal.case_id, escalated, TimedAct.ESCALATED)
