"""Where a review stands under its rule, and what one more vote would do: pure, the same for the
orchestrator deciding a vote and for an auditor replaying a log.

A review replays its recorded votes in order, each checked as it was when cast. A vote may be cast
when, in this order: the review is open; it is before the deadline; the principal is not an author;
they have not decided this stage; they decided no earlier stage (unless the rule lets one principal
count in several); and the stage admits any reviewer or they hold one of its groups, or of its
``escalate_to`` groups once an escalation at or before the vote's time is recorded. Then:

    decision  in the current stage, after counting it          outcome     the review
    APPROVE   approvals < stage.approvals                      COUNTS      open, same stage
    APPROVE   approvals = stage.approvals, a stage follows     ADVANCES    open, next stage begins now
    APPROVE   approvals = stage.approvals, the last stage      COMPLETES   COMPLETE: call the receiver
    DECLINE   declines < stage.declines_to_end                 COUNTS      open, same stage
    DECLINE   declines = stage.declines_to_end                 DECLINES    DECLINED

A stage is due ``stage.due`` after it began (the review's start, or the vote that completed the
stage before); the deadline is ``rule.deadline`` after the review's start. A recorded escalation
must be of a stage that escalates, began and was due by then; a recorded vote the rule would have
refused makes the record inconsistent, and ``review_progress`` says which vote.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from decisionflow.review_rules._errors import InconsistentReview
from decisionflow.review_rules._model import ReviewRule, Stage
from decisionflow.review_rules._record import (
    Escalation,
    ReviewRecord,
    ReviewStatus,
    Vote,
    VoteOutcome,
    VoteRefusal,
)
from decisionflow.vocabulary import Decision


@dataclass(frozen=True, slots=True)
class StageTally:
    """One stage begun so far: who approved and declined it, when it began and ended, when it was escalated."""

    index: int
    stage: Stage
    started_at: datetime
    approvals: tuple[str, ...] = ()
    declines: tuple[str, ...] = ()
    ended_at: datetime | None = None
    escalated_at: datetime | None = None
    """As recorded; it widens eligibility only for votes at or after it."""

    @property
    def due_at(self) -> datetime | None:
        """When the stage is due (and may be escalated); None when it is never due."""
        return None if self.stage.due is None else self.started_at + self.stage.due

    def escalated_by(self, moment: datetime) -> bool:
        """Return True when an escalation of this stage is recorded at or before moment."""
        return self.escalated_at is not None and self.escalated_at <= moment

    def eligible_groups(self, moment: datetime) -> tuple[str, ...]:
        """The groups whose members may decide the stage at moment, in code point order; empty: any reviewer."""
        if self.escalated_by(moment):
            return tuple(sorted((*self.stage.groups, *self.stage.escalate_to)))
        return self.stage.groups


@dataclass(frozen=True, slots=True)
class ReviewProgress:
    """Where a review stands at ``now``: its status, every stage begun (the last is the current one), its deadline."""

    rule: ReviewRule
    authors: frozenset[str]
    now: datetime
    status: ReviewStatus
    stages: tuple[StageTally, ...]
    deadline_at: datetime | None

    @property
    def current(self) -> StageTally:
        """The stage being decided; once the review has ended, the stage that ended it."""
        return self.stages[-1]

    @property
    def stage_index(self) -> int:
        """The current stage's place in the rule, from 0."""
        return self.current.index

    @property
    def stage_name(self) -> str:
        """The current stage's name."""
        return self.current.stage.name

    @property
    def approvals(self) -> tuple[str, ...]:
        """Who approved the current stage, in the order recorded."""
        return self.current.approvals

    @property
    def approvals_needed(self) -> int:
        """How many approvals complete the current stage."""
        return self.current.stage.approvals

    @property
    def declines(self) -> tuple[str, ...]:
        """Who declined the current stage, in the order recorded."""
        return self.current.declines

    @property
    def eligible_groups(self) -> tuple[str, ...]:
        """The groups whose members may decide the current stage now; empty: any reviewer."""
        return self.current.eligible_groups(self.now)

    @property
    def due_at(self) -> datetime | None:
        """When the current stage is due; None when it is never due."""
        return self.current.due_at

    @property
    def is_due(self) -> bool:
        """True while the review is open and its current stage is due."""
        due_at = self.current.due_at
        return self.is_open and due_at is not None and self.now >= due_at

    @property
    def escalated(self) -> bool:
        """True when the current stage's escalation is recorded by now."""
        return self.current.escalated_by(self.now)

    @property
    def should_escalate(self) -> bool:
        """True when the current stage is due, escalates, and no escalation of it is recorded yet."""
        return self.is_due and bool(self.current.stage.escalate_to) and self.current.escalated_at is None

    @property
    def past_deadline(self) -> bool:
        """True while the review is open and its deadline has passed: it should expire."""
        return self.is_open and self.deadline_at is not None and self.now >= self.deadline_at

    @property
    def is_open(self) -> bool:
        """True until the review completes or is declined."""
        return self.status is ReviewStatus.OPEN

    @property
    def complete(self) -> bool:
        """True once every stage has its approvals."""
        return self.status is ReviewStatus.COMPLETE

    @property
    def declined(self) -> bool:
        """True once a stage reached its declines_to_end."""
        return self.status is ReviewStatus.DECLINED

    def vote_refusal(self, principal: str, groups: Collection[str]) -> VoteRefusal | None:
        """Return why principal, holding groups, may not vote now; None when they may."""
        if not self.is_open:
            return VoteRefusal.REVIEW_ENDED
        if self.deadline_at is not None and self.now >= self.deadline_at:
            return VoteRefusal.PAST_DEADLINE
        if principal in self.authors:
            return VoteRefusal.AUTHOR
        if principal in self.current.approvals or principal in self.current.declines:
            return VoteRefusal.ALREADY_VOTED
        if self.rule.distinct_across_stages and any(
            principal in tally.approvals or principal in tally.declines for tally in self.stages[:-1]
        ):
            return VoteRefusal.COUNTED_IN_EARLIER_STAGE
        eligible = self.eligible_groups
        if eligible and not set(eligible).intersection(groups):
            return VoteRefusal.NOT_ELIGIBLE
        return None

    def may_vote(self, principal: str, groups: Collection[str]) -> bool:
        """Return True when principal, holding groups, may vote now."""
        return self.vote_refusal(principal, groups) is None


@dataclass(frozen=True, slots=True)
class VoteEffect:
    """What a vote does: its outcome, why it is refused (only when REFUSED), and the review after it."""

    outcome: VoteOutcome
    refusal: VoteRefusal | None
    progress: ReviewProgress
    """Where the review stands at the vote's time, the vote counted (unchanged when it is refused)."""


def review_progress(record: ReviewRecord, now: datetime) -> ReviewProgress:
    """Return where the recorded review stands at now; InconsistentReview naming the first recorded vote or
    escalation the rule would have refused."""
    progress, _ = _replay(record)
    return replace(progress, now=now)


def vote_effect(record: ReviewRecord, vote: Vote) -> VoteEffect:
    """Return what vote, cast at ``vote.at`` after the recorded ones, does; the vote must be recorded with that
    same time and groups for a replay to reach the same answer."""
    recorded, escalated_at = _replay(record)
    progress = replace(recorded, now=vote.at)
    refusal = progress.vote_refusal(vote.principal, vote.groups)
    if refusal is not None:
        return VoteEffect(VoteOutcome.REFUSED, refusal, progress)
    outcome, after = _count(progress, vote, escalated_at)
    return VoteEffect(outcome, None, after)


def _replay(record: ReviewRecord) -> tuple[ReviewProgress, dict[int, datetime]]:
    escalated_at = _escalation_times(record.rule, record.escalations)
    deadline_at = None if record.rule.deadline is None else record.started_at + record.rule.deadline
    first = StageTally(0, record.rule.stages[0], record.started_at, escalated_at=escalated_at.get(0))
    progress = ReviewProgress(record.rule, record.authors, record.started_at, ReviewStatus.OPEN, (first,), deadline_at)
    for index, vote in enumerate(record.votes):
        progress = replace(progress, now=vote.at)
        refusal = progress.vote_refusal(vote.principal, vote.groups)
        if refusal is not None:
            raise InconsistentReview(
                index, f"{vote.principal!r} could not {vote.decision.label}: {refusal.explanation}"
            )
        _, progress = _count(progress, vote, escalated_at)
    _check_escalations(progress, record.escalations)
    return progress, escalated_at


def _escalation_times(rule: ReviewRule, escalations: tuple[Escalation, ...]) -> dict[int, datetime]:
    times: dict[int, datetime] = {}
    for escalation in escalations:
        index = escalation.stage_index
        if not 0 <= index < len(rule.stages):
            raise InconsistentReview(None, f"the rule has no stage {index}")
        if not rule.stages[index].escalate_to:
            raise InconsistentReview(None, f"stage {rule.stages[index].name!r} does not escalate")
        if index in times:
            raise InconsistentReview(None, f"stage {rule.stages[index].name!r} is escalated twice")
        times[index] = escalation.at
    return times


def _check_escalations(progress: ReviewProgress, escalations: tuple[Escalation, ...]) -> None:
    for escalation in escalations:
        name = progress.rule.stages[escalation.stage_index].name
        if escalation.stage_index >= len(progress.stages):
            raise InconsistentReview(None, f"stage {name!r} is escalated but never began")
        due_at = progress.stages[escalation.stage_index].due_at
        if due_at is not None and escalation.at < due_at:
            raise InconsistentReview(
                None, f"stage {name!r} is escalated at {escalation.at}, before it was due at {due_at}"
            )


def _count(
    progress: ReviewProgress, vote: Vote, escalated_at: Mapping[int, datetime]
) -> tuple[VoteOutcome, ReviewProgress]:
    """Count an admitted vote: the outcome and the review after it (see the table in the module docstring)."""
    tally, earlier = progress.current, progress.stages[:-1]
    if vote.decision is Decision.DECLINE:
        tally = replace(tally, declines=(*tally.declines, vote.principal))
        if len(tally.declines) < tally.stage.declines_to_end:
            return VoteOutcome.COUNTS, replace(progress, stages=(*earlier, tally))
        ended = replace(tally, ended_at=vote.at)
        return VoteOutcome.DECLINES, replace(progress, status=ReviewStatus.DECLINED, stages=(*earlier, ended))
    tally = replace(tally, approvals=(*tally.approvals, vote.principal))
    if len(tally.approvals) < tally.stage.approvals:
        return VoteOutcome.COUNTS, replace(progress, stages=(*earlier, tally))
    ended = replace(tally, ended_at=vote.at)
    following = tally.index + 1
    if following == len(progress.rule.stages):
        return VoteOutcome.COMPLETES, replace(progress, status=ReviewStatus.COMPLETE, stages=(*earlier, ended))
    after = StageTally(following, progress.rule.stages[following], vote.at, escalated_at=escalated_at.get(following))
    return VoteOutcome.ADVANCES, replace(progress, stages=(*earlier, ended, after))
