"""What is recorded of one review, and the words for what a vote does or why it is refused.

A review is its rule (captured when the review started), the proposal's authors, when it started,
the votes in the order they were recorded and the escalations of its stages. Each vote keeps the
groups its principal held when it was cast: eligibility is decided then, and an auditor checks it
later from the record alone.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from decisionflow.review_rules._model import ReviewRule
from decisionflow.vocabulary import Decision


def _aware(moment: datetime, what: str) -> None:
    # Naive and aware times do not compare; a naive one would fail later, far from its cause.
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware")


@dataclass(frozen=True, slots=True)
class Vote:
    """One recorded decision: who, APPROVE or DECLINE, the groups they held then, and when."""

    principal: str
    decision: Decision
    groups: frozenset[str]
    at: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", frozenset(self.groups))
        if self.decision not in (Decision.APPROVE, Decision.DECLINE):
            raise ValueError(f"a vote approves or declines, not {self.decision!r}")
        _aware(self.at, "a vote's time")


@dataclass(frozen=True, slots=True)
class Escalation:
    """A stage escalated at a time: from then on, members of its ``escalate_to`` groups may decide it too."""

    stage_index: int
    at: datetime

    def __post_init__(self) -> None:
        _aware(self.at, "an escalation's time")


@dataclass(frozen=True, slots=True)
class ReviewRecord:
    """One review as recorded: its rule, the proposal's authors, its start, its votes and escalations in order."""

    rule: ReviewRule
    authors: frozenset[str]
    started_at: datetime
    votes: tuple[Vote, ...] = ()
    escalations: tuple[Escalation, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "authors", frozenset(self.authors))
        object.__setattr__(self, "votes", tuple(self.votes))
        object.__setattr__(self, "escalations", tuple(self.escalations))
        _aware(self.started_at, "a review's start")

    def with_votes(self, votes: Iterable[Vote]) -> ReviewRecord:
        """Return the same review with these votes recorded after its own."""
        return ReviewRecord(self.rule, self.authors, self.started_at, (*self.votes, *votes), self.escalations)


class ReviewStatus(enum.StrEnum):
    """Where a review stands under its rule. A review past its deadline stays OPEN until its expiry is recorded."""

    OPEN = "open"
    COMPLETE = "complete"
    """Every stage has its approvals: the effect is due."""
    DECLINED = "declined"
    """A stage reached its ``declines_to_end``."""


class VoteOutcome(enum.StrEnum):
    """What a vote does to a review."""

    REFUSED = "refused"
    """Not recorded: the principal may not vote now (``VoteEffect.refusal`` says why)."""
    COUNTS = "counts"
    """Recorded; the stage still needs more approvals (or more declines to end the review)."""
    ADVANCES = "advances"
    """Completes a stage that is not the last; the next stage begins."""
    COMPLETES = "completes"
    """Completes the last stage: the review is approved, and this vote is the one that calls the receiver."""
    DECLINES = "declines"
    """Ends the review as declined."""


class VoteRefusal(enum.StrEnum):
    """Why a principal may not vote now, in the order the checks are made."""

    REVIEW_ENDED = "review_ended"
    PAST_DEADLINE = "past_deadline"
    AUTHOR = "author"
    ALREADY_VOTED = "already_voted"
    COUNTED_IN_EARLIER_STAGE = "counted_in_earlier_stage"
    NOT_ELIGIBLE = "not_eligible"

    @property
    def explanation(self) -> str:
        """The refusal as a sentence a reviewer reads."""
        return _EXPLANATIONS[self]


_EXPLANATIONS = {
    VoteRefusal.REVIEW_ENDED: "the review has ended: it was completed or declined",
    VoteRefusal.PAST_DEADLINE: "the review is past its deadline",
    VoteRefusal.AUTHOR: "an author of the proposal may not decide it",
    VoteRefusal.ALREADY_VOTED: "the principal has already decided this stage",
    VoteRefusal.COUNTED_IN_EARLIER_STAGE: (
        "the principal decided an earlier stage, and the rule counts a principal in one stage only"
    ),
    VoteRefusal.NOT_ELIGIBLE: "the principal is in none of the groups that may decide this stage now",
}
