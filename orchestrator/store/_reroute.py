"""Re-routing: an operator moves the pending reviews of an action to the rule in force for it now
(``decisionflow-orchestrator reroute-reviews``, docs/review-rules.md#re-routing).

``reroute_candidates`` pages through the action's pending reviews (each case's current proposal, in
PENDING_REVIEW) that follow another rule. ``reroute`` then takes one of them under the per-operation
lock a vote and the review timer take (orchestrator.store._votes) and decides in that transaction:

    no longer pending (decided, expired, superseded meanwhile)   -> ENDED, nothing written
    follows that rule already                                    -> ALREADY, nothing written
    a vote recorded                                              -> KEPT_VOTES_CAST, nothing written
    a stage escalated                                            -> KEPT_ESCALATED, nothing written
    anything else                                                -> REROUTED: the rule stored, the
        proposal's rule_digest and the operation's rerouted_at set, the ``reroute`` leaf appended

Approvals given under a rule are never counted under another, so a review on which anything was
decided keeps its rule. A decision taken under the rule a review followed before the re-route is not
recorded after it: the decision's statement requires the ``rerouted_at`` the deciding call read
(orchestrator.store._statements), and a vote re-reads the rule under the lock; each raises
ReviewRerouted, and the call decides again under the rule in force.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from decisionflow.review_rules import ReviewRule, default_rule, rule_digest
from decisionflow.transparency import RerouteLeaf
from decisionflow.vocabulary import CaseId, OperationId
from decisionflow_server.storage.db import UtcDateTime
from orchestrator.audit_log.events import AuditEntry
from orchestrator.errors import NotFound
from orchestrator.schema import cases, escalations, operations, proposals, votes
from orchestrator.store import _audit_entries
from orchestrator.store import _statements as q
from orchestrator.store._proposals import store_rule_txn
from orchestrator.store._store_base import StoreBase

_OPERATION_ID: sa.BindParameter[str] = sa.bindparam("b_operation_id")
_LOCK_CURRENT = (
    sa.select(
        operations.c.state,
        operations.c.case_id,
        cases.c.current_operation_id,
        proposals.c.action,
        proposals.c.rule_digest,
    )
    .join(cases, cases.c.case_id == operations.c.case_id)
    .join(proposals, proposals.c.operation_id == operations.c.operation_id)
    .where(operations.c.operation_id == _OPERATION_ID)
    .with_for_update(of=operations)
)
_VOTED = sa.select(sa.exists().where(votes.c.operation_id == _OPERATION_ID))
_ESCALATED = sa.select(sa.exists().where(escalations.c.operation_id == _OPERATION_ID))
_SET_RULE = (
    proposals.update().where(proposals.c.operation_id == _OPERATION_ID).values(rule_digest=sa.bindparam("b_digest"))
)
_SET_REROUTED = (
    operations.update()
    .where(operations.c.operation_id == _OPERATION_ID)
    .values(rerouted_at=sa.bindparam("b_now", type_=UtcDateTime()))
)


class ReviewRerouted(Exception):
    """The review was re-routed after the deciding call read it: decide again under the rule it follows now."""

    def __init__(self, operation_id: OperationId) -> None:
        super().__init__(f"the review of {operation_id} was re-routed to another rule meanwhile")
        self.operation_id = operation_id


class RerouteOutcome(enum.StrEnum):
    """What reroute found and did for one review (see the module docstring)."""

    REROUTED = "rerouted"
    ALREADY = "already"
    KEPT_VOTES_CAST = "kept_votes_cast"
    KEPT_ESCALATED = "kept_escalated"
    ENDED = "ended"


@dataclass(frozen=True, slots=True)
class RerouteVisit:
    """One review reroute looked at: its case, the rule digest it followed (None: the default rule), the outcome."""

    operation_id: OperationId
    case_id: CaseId
    from_digest: str | None
    outcome: RerouteOutcome


def target_digest(rule: ReviewRule) -> str | None:
    """The digest a review following rule stores: None for its action's default rule."""
    return None if rule == default_rule(rule.action) else rule_digest(rule)


def reroute_entry(operation_id: OperationId, case_id: CaseId, rule: ReviewRule, at: datetime) -> AuditEntry:
    """The audit entry of a review moved to rule at at."""
    captured = None if rule == default_rule(rule.action) else rule
    return AuditEntry.of(RerouteLeaf(at, operation_id, rule.action, captured), "reroute", case_id)


class RerouteMethods(StoreBase):
    """The reads and writes of reroute-reviews."""

    def reroute_candidates(self, rule: ReviewRule, after: OperationId | None, limit: int) -> tuple[OperationId, ...]:
        """Return up to limit pending reviews of rule's action, each its case's current proposal, that follow
        another rule, in operation id order after the id given (None: from the first)."""
        digest = target_digest(rule)
        query = (
            sa.select(operations.c.operation_id)
            .join(proposals, proposals.c.operation_id == operations.c.operation_id)
            .join(cases, cases.c.current_operation_id == operations.c.operation_id)
            .where(
                operations.c.state == q.PENDING_REVIEW,
                proposals.c.action == rule.action,
                proposals.c.rule_digest.is_distinct_from(digest),
            )
            .order_by(operations.c.operation_id)
            .limit(limit)
        )
        if after is not None:
            query = query.where(operations.c.operation_id > after)
        with self.transactions.read() as conn:
            return tuple(OperationId(row.operation_id) for row in conn.execute(query))

    def reroute(self, operation_id: OperationId, rule: ReviewRule, now: datetime, *, dry_run: bool) -> RerouteVisit:
        """Move the pending review to rule (of its action) unless anything was decided on it (see the module
        docstring), with the ``reroute`` leaf, in one transaction serialised with its votes; on a dry run
        only say what would happen. Raises NotFound for an unknown operation."""
        digest = target_digest(rule)
        with self.transactions.write() as conn:
            row = conn.execute(_LOCK_CURRENT, {"b_operation_id": operation_id}).first()
            if row is None:
                raise NotFound("operation", operation_id)
            if row.action != rule.action:
                raise ValueError(f"{operation_id} is a proposal of {row.action!r}, not of {rule.action!r}")
            case_id = CaseId(row.case_id)

            def visit(outcome: RerouteOutcome) -> RerouteVisit:
                return RerouteVisit(operation_id, case_id, row.rule_digest, outcome)

            if row.state != q.PENDING_REVIEW or row.current_operation_id != operation_id:
                return visit(RerouteOutcome.ENDED)
            if row.rule_digest == digest:
                return visit(RerouteOutcome.ALREADY)
            if conn.execute(_VOTED, {"b_operation_id": operation_id}).scalar_one():
                return visit(RerouteOutcome.KEPT_VOTES_CAST)
            if conn.execute(_ESCALATED, {"b_operation_id": operation_id}).scalar_one():
                return visit(RerouteOutcome.KEPT_ESCALATED)
            if dry_run:
                return visit(RerouteOutcome.REROUTED)
            if digest is not None:
                store_rule_txn(conn, rule)
            conn.execute(_SET_RULE, {"b_operation_id": operation_id, "b_digest": digest})
            conn.execute(_SET_REROUTED, {"b_operation_id": operation_id, "b_now": now})
            _audit_entries.append_txn(conn, reroute_entry(operation_id, case_id, rule, now))
            return visit(RerouteOutcome.REROUTED)
