"""The votes of reviews under a rule other than the default one: ``VoteMethods`` records one vote in a
transaction that decides it against the votes recorded before it, and reads them back.

Votes of one operation are decided one at a time: the transaction first locks the operation's row
(PostgreSQL: ``SELECT … FOR UPDATE``; SQLite runs one write transaction at a time, begun
``IMMEDIATE``), then reads the votes and asks ``vote_effect`` what this one does. So two last
approvals racing are decided in turn: the first completes the review, the second finds it ended.
The vote row (one per principal and operation: the unique key) and its audit leaf are written in
that transaction, or nothing is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from decisionflow.review_rules import (
    Escalation,
    ReviewProgress,
    ReviewRecord,
    Vote,
    VoteEffect,
    VoteOutcome,
    review_progress,
    vote_effect,
)
from decisionflow.transparency import VoteLeaf
from decisionflow.vocabulary import CaseId, Decision, OperationId
from orchestrator.audit_log.events import AuditEntry
from orchestrator.domain import Operation, Proposal
from orchestrator.errors import NotFound
from orchestrator.schema import escalations, operations, proposals, votes
from orchestrator.store import _audit_entries
from orchestrator.store import _statements as q
from orchestrator.store._columns import decision_of, decision_text
from orchestrator.store._proposals import proposal_txn
from orchestrator.store._reroute import ReviewRerouted, target_digest
from orchestrator.store._rows import operation_from
from orchestrator.store._store_base import StoreBase

_OPERATION_ID: sa.BindParameter[str] = sa.bindparam("b_operation_id")
_LOCK_OPERATION = sa.select(operations.c.state).where(operations.c.operation_id == _OPERATION_ID).with_for_update()
_VOTES = sa.select(votes).where(votes.c.operation_id == _OPERATION_ID).order_by(votes.c.vote_id)
_INSERT_VOTE = votes.insert().inline()
_ESCALATIONS = (
    sa.select(escalations.c.stage_index, escalations.c.escalated_at)
    .where(escalations.c.operation_id == _OPERATION_ID)
    .order_by(escalations.c.stage_index)
)
_RULE_DIGEST = sa.select(proposals.c.rule_digest).where(proposals.c.operation_id == _OPERATION_ID)


@dataclass(frozen=True, slots=True)
class CastVote:
    """What a vote's transaction decided: the vote (its time and groups as decided), what it does, the
    operation's state (column text) when it was decided, and whether it was written (False: refused,
    or the operation was no longer pending review)."""

    vote: Vote
    effect: VoteEffect
    state: str
    written: bool


class VoteAlreadyCast(Exception):
    """The principal has a vote on the operation already (carried as ``vote``): a replay, or a conflict."""

    def __init__(self, vote: Vote) -> None:
        super().__init__(f"{vote.principal} already voted {vote.decision}")
        self.vote = vote


def groups_text(groups: frozenset[str]) -> str:
    """Return the column text of a principal's groups: comma-joined in code point order (no group name
    holds a comma: decisionflow.vocabulary.GROUP_NAME)."""
    return ",".join(sorted(groups))


def groups_of(text: str) -> frozenset[str]:
    """Return the groups a column holds."""
    return frozenset(text.split(",")) if text else frozenset()


def votes_txn(conn: sa.Connection, operation_id: OperationId) -> tuple[Vote, ...]:
    """Return the operation's votes in the order they were recorded."""
    rows = conn.execute(_VOTES, {"b_operation_id": operation_id})
    return tuple(Vote(r.principal, decision_of(r.decision), groups_of(r.groups), r.voted_at) for r in rows)


def escalations_txn(conn: sa.Connection, operation_id: OperationId) -> tuple[Escalation, ...]:
    """Return the operation's escalated stages, in stage order."""
    rows = conn.execute(_ESCALATIONS, {"b_operation_id": operation_id})
    return tuple(Escalation(r.stage_index, r.escalated_at) for r in rows)


def captured_digest(proposal: Proposal) -> str | None:
    """The rule digest stored with proposal as it was read: None for its action's default rule."""
    return target_digest(proposal.review_rule())


def review_record(
    proposal: Proposal, recorded: tuple[Vote, ...], escalated: tuple[Escalation, ...] = ()
) -> ReviewRecord:
    """Return the review of proposal as recorded: its rule, its authors, its start, its votes and escalations."""
    return ReviewRecord(proposal.review_rule(), proposal.authors, proposal.created_at, recorded, escalated)


def vote_entry(operation_id: OperationId, case_id: CaseId, vote: Vote, stage_index: int) -> AuditEntry:
    """The audit entry of a vote counted in stage stage_index."""
    leaf = VoteLeaf(vote.at, operation_id, vote.decision.value, vote.principal, stage_index, tuple(sorted(vote.groups)))
    return AuditEntry.of(leaf, "vote", case_id)


class VoteMethods(StoreBase):
    """Votes of reviews under a rule, each decided against the ones recorded before it."""

    def operation_progress(self, operation_id: OperationId, now: datetime) -> tuple[Operation, ReviewProgress | None]:
        """Return the operation (as get_operation does) and, when its review follows a rule other than the
        default one, where the review stands at now, read in one transaction (one statement under the default
        rule); raise NotFound."""
        with self.transactions.read() as conn:
            row = conn.execute(q.OPERATION_AND_RULE_BY_ID, {"b_operation_id": operation_id}).first()
            if row is None:
                raise NotFound("operation", operation_id)
            operation = operation_from(row)
            if row.rule_digest is None:
                return operation, None
            proposal = proposal_txn(conn, operation_id)
            record = review_record(proposal, votes_txn(conn, operation_id), escalations_txn(conn, operation_id))
            return operation, review_progress(record, now)

    def votes(self, operation_id: OperationId) -> tuple[Vote, ...]:
        """Return the operation's votes in the order they were recorded (none under the default rule)."""
        with self.transactions.read() as conn:
            return votes_txn(conn, operation_id)

    def escalations(self, operation_id: OperationId) -> tuple[Escalation, ...]:
        """Return the operation's escalated stages, in stage order (none under the default rule)."""
        with self.transactions.read() as conn:
            return escalations_txn(conn, operation_id)

    def cast_vote(
        self, proposal: Proposal, principal: str, decision: Decision, groups: frozenset[str], now: datetime
    ) -> CastVote:
        """Decide principal's vote against the votes recorded before it, serialised per operation, and record it
        with its audit leaf unless it is refused. Its time is now, or the last vote's if later (the votes'
        times never go back). Raises VoteAlreadyCast when principal has voted on it already (nothing
        written), NotFound for an unknown operation, ReviewRerouted when the review follows another rule than
        proposal's now (re-routed since it was read: decide again)."""
        operation_id = proposal.operation_id
        with self.transactions.write() as conn:
            state = conn.execute(_LOCK_OPERATION, {"b_operation_id": operation_id}).scalar_one_or_none()
            if state is None:
                raise NotFound("operation", operation_id)
            if conn.execute(_RULE_DIGEST, {"b_operation_id": operation_id}).scalar_one() != captured_digest(proposal):
                raise ReviewRerouted(operation_id)
            recorded = votes_txn(conn, operation_id)
            for earlier in recorded:
                if earlier.principal == principal:
                    raise VoteAlreadyCast(earlier)
            at = max([now, *(v.at for v in recorded)])
            vote = Vote(principal, decision, groups, at)
            record = review_record(proposal, recorded, escalations_txn(conn, operation_id))
            effect = vote_effect(record, vote)
            # Decided or expired meanwhile: the caller answers from the operation's state; nothing is written.
            if effect.outcome is VoteOutcome.REFUSED or state != q.PENDING_REVIEW:
                return CastVote(vote, effect, state, written=False)
            stage_index = len(review_progress(record, at).stages) - 1
            # The lock rules out a second vote of the principal here: the unique key only guards against a bug.
            conn.execute(
                _INSERT_VOTE,
                {
                    "operation_id": operation_id,
                    "principal": principal,
                    "decision": decision_text(decision),
                    "groups": groups_text(groups),
                    "stage_index": stage_index,
                    "voted_at": at,
                },
            )
            _audit_entries.append_txn(conn, vote_entry(operation_id, proposal.case_id, vote, stage_index))
            return CastVote(vote, effect, state, written=True)
