"""Properties of evaluation over random rules and random sequences of votes and escalation attempts:
the product agrees vote by vote with an independent reference, a replay of what it accepted reaches the
same place, what it refused makes a record inconsistent, and every completed review met its quorums."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import event, given, settings
from hypothesis import strategies as st

from decisionflow.review_rules import (
    Escalation,
    InconsistentReview,
    ReviewProgress,
    ReviewRecord,
    ReviewRule,
    ReviewStatus,
    Vote,
    VoteOutcome,
    review_progress,
    vote_effect,
)
from decisionflow.vocabulary import Decision
from tests.review_rules.strategies import GROUPS, PRINCIPALS, escalating_rules, rules

START = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)

# One step: minutes after the step before, then a vote (principal, decision, groups held) or None for
# the periodic job's turn (escalate the current stage if it should).
# Mostly minutes apart, sometimes hours: stages fall due and deadlines pass, but not before most votes.
steps = st.lists(
    st.tuples(
        st.integers(0, 15) | st.integers(0, 180),
        st.none()
        | st.tuples(
            st.sampled_from(PRINCIPALS),
            st.sampled_from([Decision.APPROVE] * 4 + [Decision.DECLINE]),
            st.frozensets(st.sampled_from(GROUPS), max_size=3),
        ),
    ),
    min_size=3,
    max_size=40,
)
authors = st.frozensets(st.sampled_from(PRINCIPALS), max_size=2)


@dataclass
class Reference:
    """The rule read directly, written apart from the product: one mutable walk over the steps."""

    rule: ReviewRule
    authors: frozenset[str]
    stage: int = 0
    begun: datetime = START
    approvals: list[str] = field(default_factory=list)
    declines: list[str] = field(default_factory=list)
    earlier: set[str] = field(default_factory=set)
    ended: str | None = None
    escalated: dict[int, datetime] = field(default_factory=dict)

    def should_escalate(self, now: datetime) -> bool:
        stage = self.rule.stages[self.stage]
        due = stage.due is not None and now >= self.begun + stage.due
        return self.ended is None and due and bool(stage.escalate_to) and self.stage not in self.escalated

    def vote(self, vote: Vote) -> str:
        stage = self.rule.stages[self.stage]
        deadline = self.rule.deadline
        groups = set(stage.groups)
        if self.stage in self.escalated and self.escalated[self.stage] <= vote.at:
            groups |= set(stage.escalate_to)
        if self.ended is not None:
            return "review_ended"
        if deadline is not None and vote.at >= START + deadline:
            return "past_deadline"
        if vote.principal in self.authors:
            return "author"
        if vote.principal in self.approvals + self.declines:
            return "already_voted"
        if self.rule.distinct_across_stages and vote.principal in self.earlier:
            return "counted_in_earlier_stage"
        if groups and not groups & vote.groups:
            return "not_eligible"
        if vote.decision is Decision.DECLINE:
            self.declines.append(vote.principal)
            if len(self.declines) == stage.declines_to_end:
                self.ended = "declined"
                return "declines"
            return "counts"
        self.approvals.append(vote.principal)
        if len(self.approvals) < stage.approvals:
            return "counts"
        if self.stage == len(self.rule.stages) - 1:
            self.ended = "complete"
            return "completes"
        self.earlier |= {*self.approvals, *self.declines}
        self.stage, self.begun, self.approvals, self.declines = self.stage + 1, vote.at, [], []
        return "advances"


Walk = list[tuple[int, tuple[str, Decision, frozenset[str]] | None]]


@settings(max_examples=500)
@given(rules(small_world=True), authors, steps)
def test_the_product_agrees_with_the_reference_and_its_own_replay(
    rule: ReviewRule, authored_by: frozenset[str], walk: Walk
) -> None:
    _walk(rule, authored_by, walk)


@settings(max_examples=300)
@given(escalating_rules(), authors, steps)
def test_escalations_agree_with_the_reference(rule: ReviewRule, authored_by: frozenset[str], walk: Walk) -> None:
    _walk(rule, authored_by, walk)


def _walk(rule: ReviewRule, authored_by: frozenset[str], walk: Walk) -> None:
    """Cast each step's vote (or escalate when due), checking the product against the reference each time."""
    reference = Reference(rule, authored_by)
    record = ReviewRecord(rule, authored_by, START)
    now, outcomes = START, list[VoteOutcome]()
    for minutes, cast in walk:
        now += timedelta(minutes=minutes)
        progress = review_progress(record, now)
        assert progress.should_escalate == reference.should_escalate(now)
        if cast is None:
            if progress.should_escalate:
                escalation = Escalation(progress.stage_index, now)
                reference.escalated[progress.stage_index] = now
                event(f"escalated: stage {progress.stage_index}")
                record = ReviewRecord(rule, authored_by, START, record.votes, (*record.escalations, escalation))
            continue
        vote = Vote(*cast, now)
        effect = vote_effect(record, vote)
        expected = reference.vote(vote)
        if effect.outcome is VoteOutcome.REFUSED:
            assert effect.refusal is not None and effect.refusal.value == expected
            event(f"refused: {expected}")
            assert progress.vote_refusal(vote.principal, vote.groups) is effect.refusal
            _assert_inconsistent_with(record, vote)
            continue
        assert effect.outcome.value == expected
        event(f"accepted: {expected}")
        if not set(progress.current.stage.groups) & vote.groups and progress.current.stage.groups:
            event("accepted: through an escalation")
        record = record.with_votes([vote])
        outcomes.append(effect.outcome)
        # The replay of what was accepted stands where the vote left it.
        assert review_progress(record, now) == effect.progress
    _assert_outcomes_fit(outcomes, review_progress(record, now).status)
    _assert_quorums_met(record, review_progress(record, now))


def _assert_inconsistent_with(record: ReviewRecord, refused: Vote) -> None:
    try:
        review_progress(record.with_votes([refused]), refused.at)
    except InconsistentReview as inconsistent:
        assert inconsistent.vote_index == len(record.votes)
    else:
        raise AssertionError("a record holding a refused vote replayed without complaint")


def _assert_outcomes_fit(outcomes: list[VoteOutcome], status: ReviewStatus) -> None:
    ending = [outcome for outcome in outcomes if outcome in (VoteOutcome.COMPLETES, VoteOutcome.DECLINES)]
    assert len(ending) <= 1 and (not ending or outcomes[-1] == ending[0])
    assert (status is ReviewStatus.COMPLETE) == (ending == [VoteOutcome.COMPLETES])
    assert (status is ReviewStatus.DECLINED) == (ending == [VoteOutcome.DECLINES])


def _assert_quorums_met(record: ReviewRecord, progress: ReviewProgress) -> None:
    seen: set[str] = set()
    votes = iter(record.votes)
    for tally in progress.stages:
        voters = [*tally.approvals, *tally.declines]
        assert len(set(voters)) == len(voters) and not set(voters) & record.authors
        if record.rule.distinct_across_stages:
            assert not set(voters) & seen
        seen |= set(voters)
        # The votes of each stage come in the record one stage after another, and each was cast by a
        # member of a group the stage admitted at that moment.
        cast = [next(votes) for _ in voters]
        assert {vote.principal for vote in cast} == set(voters)
        for vote in cast:
            admitted = tally.eligible_groups(vote.at)
            assert not admitted or set(admitted) & vote.groups
        approved = len(tally.approvals) == tally.stage.approvals
        declined = len(tally.declines) == tally.stage.declines_to_end
        if tally is not progress.current or progress.complete:
            assert approved and tally.ended_at == cast[-1].at
        elif progress.declined:
            assert declined and tally.ended_at == cast[-1].at
        else:
            assert len(tally.approvals) < tally.stage.approvals and len(tally.declines) < tally.stage.declines_to_end
    assert next(votes, None) is None
