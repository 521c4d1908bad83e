"""Votes: Approve and Decline of a review under a rule other than the default one (docs/review-rules.md).

A review under the default rule never comes here: its decision is the one approval or decline, as
before rules existed. Under another rule a decision is a vote, checked in this order:

1. a vote of the principal is recorded: the same decision is a replay (answered with where the review
   stands, and driven on if it completed but its decision is not recorded yet), another is a conflict;
2. four-eyes: an author of the proposal (or of one it came from) never counts;
3. the operation must be the case's current proposal and not expired;
4. the store decides the vote against the votes recorded before it, one vote of the operation at a time
   (``OrchestratorStore.cast_vote``): a vote the rule does not count is refused with nothing written
   (NOT_ELIGIBLE_TO_DECIDE; REVIEW_EXPIRED past the rule's deadline), one that counts is recorded with
   its audit leaf and answered AWAITING_APPROVALS, and the vote that completes or declines the review
   resumes the workflow, whose commit step records the decision once and writes the effect once.

A vote that finds the review ended by another (two last approvals racing) is answered as that review's
decision, a conflict when it asked for the other one; if that decision is not recorded yet, this call
records it (the unique key lets one call record it) under the vote that ended the review.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from decisionflow.review_rules import ReviewProgress, ReviewStatus, Vote, VoteOutcome, VoteRefusal, review_progress
from decisionflow.vocabulary import Decision, OperationState, Outcome
from decisionflow_server.runtime.auth import check_four_eyes
from orchestrator.domain import DecisionInputs, DecisionResult, Operation, Proposal, RecordedDecision
from orchestrator.errors import DecisionConflict, NotEligibleToDecide, ReviewExpired, StaleProposal
from orchestrator.store import AsyncOrchestratorStore
from orchestrator.store._votes import review_record


class CommitPath(Protocol):
    """What a vote that ends a review hands on to: the decision service's commit path."""

    async def resume(
        self,
        inputs: DecisionInputs,
        decision: Decision,
        reviewer: str,
        deadline: float | None,
        progress: ReviewProgress | None = None,
    ) -> DecisionResult:
        """Resume the workflow with the decision: recorded once, the effect written once on approval."""
        ...

    async def replay(
        self,
        recorded: RecordedDecision,
        requested: Decision,
        deadline: float | None,
        operation: Operation | None = None,
        proposal: Proposal | None = None,
    ) -> DecisionResult:
        """Report a recorded decision (a conflict when requested differs)."""
        ...


def check_open(inputs: DecisionInputs) -> None:
    """Raise StaleProposal unless the operation is its case's current proposal, ReviewExpired if it expired."""
    operation_id = inputs.operation.operation_id
    current = inputs.current_operation_id
    if current != operation_id:
        raise StaleProposal(operation_id, current or "")
    if inputs.operation.state is OperationState.EXPIRED:
        raise ReviewExpired(operation_id)


def _final(progress: ReviewProgress) -> tuple[Decision, str] | None:
    """The decision the votes reached and the principal whose vote reached it; None while the review is open."""
    if progress.status is ReviewStatus.OPEN:
        return None
    tally = progress.current
    decision = Decision.APPROVE if progress.status is ReviewStatus.COMPLETE else Decision.DECLINE
    voters = tally.approvals if decision is Decision.APPROVE else tally.declines
    return decision, voters[-1]


class Votes:
    """The votes of reviews under a rule, over the store and the decision service's commit path."""

    def __init__(self, store: AsyncOrchestratorStore, decisions: CommitPath, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._decisions = decisions
        self._clock = clock

    async def vote(
        self,
        inputs: DecisionInputs,
        decision: Decision,
        reviewer: str,
        groups: frozenset[str],
        deadline: float | None,
    ) -> DecisionResult:
        """Decide reviewer's vote (the order in the module docstring); no decision is recorded yet."""
        proposal = inputs.proposal
        operation_id = proposal.operation_id
        recorded = await self._store.votes(operation_id)
        mine = next((vote for vote in recorded if vote.principal == reviewer), None)
        if mine is not None:
            if mine.decision is not decision:
                raise DecisionConflict(operation_id, mine.decision)
            return await self._stands(inputs, recorded, decision, deadline)
        check_four_eyes(proposal.authors, reviewer, enabled=True)
        check_open(inputs)
        cast = await self._store.cast_vote(proposal, reviewer, decision, groups, self._clock())
        effect = cast.effect
        if effect.refusal is VoteRefusal.PAST_DEADLINE:
            raise ReviewExpired(operation_id)
        if effect.refusal is VoteRefusal.REVIEW_ENDED or (effect.refusal is None and not cast.written):
            # Another vote ended the review, or it was decided or expired meanwhile: answer as it stands.
            fresh = await self._store.decision_inputs(operation_id)
            return await self._ended(fresh, decision, deadline)
        if effect.refusal is not None:
            raise NotEligibleToDecide(operation_id, reviewer, effect.refusal)
        if effect.outcome in (VoteOutcome.COUNTS, VoteOutcome.ADVANCES):
            return DecisionResult(inputs.operation, Outcome.AWAITING_APPROVALS, replay=False, progress=effect.progress)
        final = Decision.APPROVE if effect.outcome is VoteOutcome.COMPLETES else Decision.DECLINE
        return await self._decisions.resume(inputs, final, reviewer, deadline, effect.progress)

    async def _stands(
        self,
        inputs: DecisionInputs,
        recorded: tuple[Vote, ...],
        decision: Decision,
        deadline: float | None,
    ) -> DecisionResult:
        """Answer where the review stands; one its votes ended but whose decision is not recorded yet (its
        caller's reply lost, its process gone) is driven on under the vote that ended it."""
        escalated = await self._store.escalations(inputs.operation.operation_id)
        progress = review_progress(review_record(inputs.proposal, recorded, escalated), self._clock())
        final = _final(progress)
        if final is None:
            return DecisionResult(inputs.operation, Outcome.AWAITING_APPROVALS, replay=True, progress=progress)
        reached, by = final
        if reached is not decision:
            raise DecisionConflict(inputs.operation.operation_id, reached)
        # Not a replay when this call is the one that records the decision (the vote's own call may then
        # find it recorded, and answers as a replay).
        return await self._decisions.resume(inputs, reached, by, deadline, progress)

    async def _ended(self, inputs: DecisionInputs, decision: Decision, deadline: float | None) -> DecisionResult:
        recorded = inputs.operation.decision
        if recorded is not None:
            if recorded.decision is not decision:
                raise DecisionConflict(recorded.operation_id, recorded.decision)
            return await self._decisions.replay(recorded, decision, deadline, inputs.operation, inputs.proposal)
        check_open(inputs)
        votes = await self._store.votes(inputs.operation.operation_id)
        return await self._stands(inputs, votes, decision, deadline)
