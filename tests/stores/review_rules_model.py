"""A plain model of the store's reviews under a rule other than the default one: votes, the review timer's
escalations and expiries, re-routing, and the inbox as each reader sees it, over the model of the rest of
the store (tests/stores/orchestrator_model.py).

Written from the store's contract (the docstrings of orchestrator/store/_votes.py, _review_timer.py,
_reviewer_inbox.py and _reroute.py) and docs/review-rules.md, not from its SQL. What a vote does and where
a review stands are the pure spec's answers (decisionflow.review_rules), as the store's are. What the store
holds is kept here on its own: who voted in which stage and when, which stage each review is in and since
when, which stages were escalated, which reviews expired, which were re-routed to which rule and when (a
review re-routed starts its new rule's first stage, its times still counted from its start), the leaves
each write appends, and which reviews each reviewer is shown. Where this tally reaches a verdict of its
own (a refusal, an outcome, a due stage, a passed deadline) it must agree with the spec's, so a fault in
either shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from decisionflow.review_rules import (
    Escalation,
    ReviewProgress,
    ReviewRecord,
    ReviewRule,
    Vote,
    VoteOutcome,
    VoteRefusal,
    default_rule,
    review_progress,
    rule_digest,
    vote_effect,
)
from decisionflow.transparency import EscalationLeaf, ExpiryLeaf, RerouteLeaf, VoteLeaf
from decisionflow.vocabulary import CaseId, Decision, OperationId, OperationState
from orchestrator.domain import PendingReview, PendingReviewEntry, Proposal
from orchestrator.store import CastVote, RerouteOutcome, RerouteVisit, TimedAct, TimerVisit
from orchestrator.store._columns import state_text
from tests.stores.orchestrator_model import Refused, StoreModel


@dataclass
class RuledReview:
    """A review under a rule as the model tallies it: the stage being decided and since when, who approved
    and declined each stage, which stages were escalated and when, and whether the votes ended it."""

    rule: ReviewRule
    authors: frozenset[str]
    started_at: datetime
    stage: int = 0
    stage_started_at: datetime | None = None
    outcome: VoteOutcome | None = None
    """None while open; COMPLETES or DECLINES once the votes ended it."""
    approvals: dict[int, list[str]] = field(default_factory=dict)
    declines: dict[int, list[str]] = field(default_factory=dict)
    escalated_at: dict[int, datetime] = field(default_factory=dict)

    @property
    def stage_began(self) -> datetime:
        return self.stage_started_at or self.started_at

    def past_deadline(self, at: datetime) -> bool:
        deadline = self.rule.deadline
        return self.outcome is None and deadline is not None and at >= self.started_at + deadline

    def due(self, at: datetime) -> bool:
        """The current stage is due at at, escalates, and is not escalated yet (the review open)."""
        stage = self.rule.stages[self.stage]
        due = stage.due is not None and at >= self.stage_began + stage.due
        return self.outcome is None and due and bool(stage.escalate_to) and self.stage not in self.escalated_at

    def refusal(self, principal: str, groups: frozenset[str], at: datetime) -> VoteRefusal | None:
        """Why a first vote of principal at at is not counted (the store refuses any second vote before this)."""
        if self.outcome is not None:
            return VoteRefusal.REVIEW_ENDED
        if self.rule.deadline is not None and at >= self.started_at + self.rule.deadline:
            return VoteRefusal.PAST_DEADLINE
        if principal in self.authors:
            return VoteRefusal.AUTHOR
        stage = self.rule.stages[self.stage]
        escalated = self.stage in self.escalated_at and self.escalated_at[self.stage] <= at
        eligible = set(stage.groups) | (set(stage.escalate_to) if escalated else set())
        if stage.groups and not eligible & groups:
            return VoteRefusal.NOT_ELIGIBLE
        return None

    def count(self, decision: Decision, principal: str, at: datetime) -> VoteOutcome:
        """Count an admitted vote; return what it did."""
        stage = self.rule.stages[self.stage]
        if decision is Decision.DECLINE:
            declines = self.declines.setdefault(self.stage, [])
            declines.append(principal)
            if len(declines) < stage.declines_to_end:
                return VoteOutcome.COUNTS
            self.outcome = VoteOutcome.DECLINES
            return self.outcome
        approvals = self.approvals.setdefault(self.stage, [])
        approvals.append(principal)
        if len(approvals) < stage.approvals:
            return VoteOutcome.COUNTS
        if self.stage + 1 == len(self.rule.stages):
            self.outcome = VoteOutcome.COMPLETES
            return self.outcome
        self.stage, self.stage_started_at = self.stage + 1, at
        return VoteOutcome.ADVANCES


@dataclass
class RuledStoreModel(StoreModel):
    """The store's model with the votes and escalations of reviews under a rule."""

    ruled: dict[str, RuledReview] = field(default_factory=dict)
    votes: dict[str, list[Vote]] = field(default_factory=dict)
    # The votes table in the order its rows were written: (operation, principal, decision, groups, stage, time).
    vote_rows: list[tuple[str, str, str, str, int, datetime]] = field(default_factory=list)

    def _insert(self, proposal: Proposal, review: PendingReview, saved: Sequence[str]) -> Proposal:
        stored = super()._insert(proposal, review, saved)
        if stored.rule is not None:
            self.ruled[stored.operation_id] = RuledReview(stored.rule, stored.authors, stored.created_at)
        return stored

    # Reads.

    def escalations(self, operation_id: str) -> tuple[Escalation, ...]:
        """The operation's escalated stages, in stage order."""
        review = self.ruled.get(operation_id)
        escalated = {} if review is None else review.escalated_at
        return tuple(Escalation(stage, at) for stage, at in sorted(escalated.items()))

    def record(self, operation_id: str) -> ReviewRecord:
        """The review as recorded, for the spec to judge."""
        p = self.proposals[operation_id]
        votes = tuple(self.votes.get(operation_id, ()))
        return ReviewRecord(p.review_rule(), p.authors, p.created_at, votes, self.escalations(operation_id))

    def progress(self, operation_id: str, now: datetime) -> ReviewProgress | None:
        """Where the review stands at now; None under the default rule."""
        if operation_id not in self.ruled:
            return None
        return review_progress(self.record(operation_id), now)

    def escalation_rows(self) -> list[tuple[str, int, datetime]]:
        """The escalations table, by operation then stage."""
        return [(op, e.stage_index, e.at) for op in sorted(self.ruled) for e in self.escalations(op)]

    def under_rules(self, after: str | None, limit: int) -> tuple[OperationId, ...]:
        """Open reviews (stored PENDING_REVIEW, superseded ones too) under a rule, by id, after after."""
        open_ids = sorted(
            op
            for op in self.ruled
            if self.operations[op].state is OperationState.PENDING_REVIEW and (after is None or op > after)
        )
        return tuple(OperationId(op) for op in open_ids[:limit])

    def reroute_candidates(self, rule: ReviewRule, after: str | None, limit: int) -> tuple[OperationId, ...]:
        """Each case's current proposal of rule's action, pending review, that follows another rule, by id, after
        after."""
        wanted = captured(rule)
        ids = sorted(
            op
            for op, stored in self.operations.items()
            if stored.state is OperationState.PENDING_REVIEW
            and self.current(stored.case_id) == op
            and self.proposals[op].content.action == rule.action
            and self.proposals[op].rule != wanted
            and (after is None or op > after)
        )
        return tuple(OperationId(op) for op in ids[:limit])

    def seen(self, principal: str | None, groups: frozenset[str], now: datetime) -> list[PendingReviewEntry]:
        """The inbox as a reader sees it at now (principal None: a reader who sees every review): every review
        under the default rule; one under a rule with its progress, to a reviewer only while they may vote on it."""
        seen = []
        for entry in self.pending_reviews():
            op = entry.proposal.operation_id
            review = self.ruled.get(op)
            if review is None:
                seen.append(entry)
                continue
            voted = any(vote.principal == principal for vote in self.votes.get(op, ()))
            if principal is None or (not voted and review.refusal(principal, groups, now) is None):
                seen.append(dataclasses.replace(entry, progress=self.progress(op, now)))
        return sorted(seen, key=_inbox_place)

    # Writes.

    def cast_vote(
        self,
        operation_id: str,
        principal: str,
        decision: Decision,
        groups: frozenset[str],
        now: datetime,
        read: Proposal | None = None,
    ) -> CastVote:
        """A principal's first vote, at now or the last vote's time if later: written with its leaf unless the
        rule refuses it or the operation is no longer pending review; a second vote is refused, and so is a
        vote whose proposal was read (read: None, as stored) under another rule than the one it follows now."""
        if read is not None and read.rule != self.proposals[operation_id].rule:
            raise Refused("ReviewRerouted", OperationId(operation_id))
        recorded = self.votes.setdefault(operation_id, [])
        for earlier in recorded:
            if earlier.principal == principal:
                raise Refused("VoteAlreadyCast", earlier)
        review = self.ruled[operation_id]
        at = max([now, *(vote.at for vote in recorded)])
        vote = Vote(principal, decision, groups, at)
        effect = vote_effect(self.record(operation_id), vote)
        refused = review.refusal(principal, groups, at)
        assert effect.refusal == refused, (effect.refusal, refused)
        stored = self.operations[operation_id]
        state = state_text(stored.state)
        if refused is not None or stored.state is not OperationState.PENDING_REVIEW:
            assert effect.outcome is VoteOutcome.REFUSED or refused is None
            return CastVote(vote, effect, state, written=False)
        stage = review.stage
        assert review.count(decision, principal, at) is effect.outcome
        recorded.append(vote)
        held = tuple(sorted(groups))
        self.vote_rows.append((operation_id, principal, decision.value.lower(), ",".join(held), stage, at))
        self.leaves.append(VoteLeaf(at, OperationId(operation_id), decision.value, principal, stage, held))
        return CastVote(vote, effect, state, written=True)

    def act_on_time(self, operation_id: str, now: datetime) -> TimerVisit:
        """The timer's visit: expire an open review past its deadline, else escalate its stage when due."""
        stored = self.operations[operation_id]
        case_id = CaseId(stored.case_id)
        op = OperationId(operation_id)
        review = self.ruled.get(operation_id)
        if stored.state is not OperationState.PENDING_REVIEW or review is None:
            return TimerVisit(op, case_id, None, None)
        at = max([now, *(vote.at for vote in self.votes.get(operation_id, ()))])
        before = review_progress(self.record(operation_id), at)
        assert before.past_deadline == review.past_deadline(at)
        if review.past_deadline(at):
            stored.state, stored.state_changed_at = OperationState.EXPIRED, at
            self.leaves.append(ExpiryLeaf(at, op))
            return TimerVisit(op, case_id, before, TimedAct.EXPIRED)
        assert before.should_escalate == review.due(at)
        if not review.due(at):
            return TimerVisit(op, case_id, before, None)
        review.escalated_at[review.stage] = at
        groups = review.rule.stages[review.stage].escalate_to
        self.leaves.append(EscalationLeaf(at, op, review.stage, groups))
        return TimerVisit(op, case_id, review_progress(self.record(operation_id), at), TimedAct.ESCALATED)

    def reroute(self, operation_id: str, rule: ReviewRule, now: datetime, dry_run: bool) -> RerouteVisit:
        """reroute-reviews' visit: a pending review (its case's current proposal) on another rule, with no vote and
        no escalation recorded, moves to rule at now with its leaf (unless dry_run); any other is left as it is,
        and the visit says why."""
        stored = self.operations.get(operation_id)
        if stored is None:
            raise Refused("NotFound", "operation", operation_id)
        op = OperationId(operation_id)
        p = self.proposals[operation_id]
        following = None if p.rule is None else rule_digest(p.rule)

        def visit(outcome: RerouteOutcome) -> RerouteVisit:
            return RerouteVisit(op, CaseId(stored.case_id), following, outcome)

        if stored.state is not OperationState.PENDING_REVIEW or self.current(stored.case_id) != operation_id:
            return visit(RerouteOutcome.ENDED)
        wanted = captured(rule)
        if p.rule == wanted:
            return visit(RerouteOutcome.ALREADY)
        if self.votes.get(operation_id):
            return visit(RerouteOutcome.KEPT_VOTES_CAST)
        if self.escalations(operation_id):
            return visit(RerouteOutcome.KEPT_ESCALATED)
        if dry_run:
            return visit(RerouteOutcome.REROUTED)
        self.proposals[operation_id] = dataclasses.replace(p, rule=wanted)
        self.ruled.pop(operation_id, None)
        if wanted is not None:
            self.ruled[operation_id] = RuledReview(wanted, p.authors, p.created_at)
        stored.rerouted_at = now
        self.leaves.append(RerouteLeaf(now, op, rule.action, wanted))
        return visit(RerouteOutcome.REROUTED)


def captured(rule: ReviewRule) -> ReviewRule | None:
    """The rule as a proposal following it holds it: None for its action's default rule."""
    return None if rule == default_rule(rule.action) else rule


def _inbox_place(entry: PendingReviewEntry) -> tuple[int, datetime, datetime, str]:
    """The inbox's order: escalated reviews by due time, then the others that are due some time by due time,
    then the rest (the default rule, no due time) oldest first; ties oldest first, then by operation id."""
    since, progress = entry.pending_since, entry.progress
    if progress is None or progress.due_at is None:
        return (2, since, since, entry.proposal.operation_id)
    return (0 if progress.escalated else 1, progress.due_at, since, entry.proposal.operation_id)
