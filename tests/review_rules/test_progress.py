"""Evaluating a review under its rule: where it stands, who may vote and why not, what a vote does; a
recorded vote or escalation the rule would have refused makes the record inconsistent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from decisionflow.review_rules import (
    Escalation,
    InconsistentReview,
    ReviewRecord,
    ReviewRule,
    ReviewStatus,
    Stage,
    Vote,
    VoteOutcome,
    VoteRefusal,
    default_rule,
    review_progress,
    vote_effect,
)
from decisionflow.vocabulary import Decision

START = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
APPROVE, DECLINE = Decision.APPROVE, Decision.DECLINE
REFUND = ReviewRule(
    "refund",
    (
        Stage("leads", ("support-leads",), 2, 1, timedelta(hours=4), ("on-call-leads",)),
        Stage("finance", ("finance",)),
    ),
    timedelta(hours=72),
)
LEADS = frozenset({"support-leads"})
FINANCE = frozenset({"finance"})


def _at(minutes: int) -> datetime:
    return START + timedelta(minutes=minutes)


def _vote(principal: str, decision: Decision = APPROVE, groups: frozenset[str] = frozenset(), minutes: int = 1) -> Vote:
    return Vote(principal, decision, groups, _at(minutes))


def _record(rule: ReviewRule, *votes: Vote, escalations: tuple[Escalation, ...] = ()) -> ReviewRecord:
    return ReviewRecord(rule, frozenset({"alice"}), START, votes, escalations)


def test_under_the_default_rule_the_first_approval_of_a_non_author_completes_the_review() -> None:
    record = _record(default_rule("record_support_review"))
    progress = review_progress(record, _at(0))
    assert (progress.status, progress.stage_name, progress.approvals_needed, progress.eligible_groups) == (
        ReviewStatus.OPEN,
        "review",
        1,
        (),
    )
    assert progress.vote_refusal("alice", ()) is VoteRefusal.AUTHOR
    assert progress.may_vote("rita", ())
    effect = vote_effect(record, _vote("rita"))
    assert (effect.outcome, effect.refusal) == (VoteOutcome.COMPLETES, None)
    assert effect.progress.status is ReviewStatus.COMPLETE
    assert effect.progress.approvals == ("rita",)
    done = record.with_votes([_vote("rita")])
    assert vote_effect(done, _vote("sam", DECLINE, minutes=2)).refusal is VoteRefusal.REVIEW_ENDED


def test_under_the_default_rule_one_decline_ends_the_review() -> None:
    effect = vote_effect(_record(default_rule("x")), _vote("rita", DECLINE))
    assert (effect.outcome, effect.progress.status, effect.progress.declines) == (
        VoteOutcome.DECLINES,
        ReviewStatus.DECLINED,
        ("rita",),
    )
    assert effect.progress.declined and not effect.progress.is_open


def test_a_refund_needs_two_leads_then_finance_and_the_last_approval_completes_it() -> None:
    record = _record(REFUND)
    first = vote_effect(record, _vote("lena", groups=LEADS, minutes=10))
    assert (first.outcome, first.progress.approvals, first.progress.approvals_needed) == (
        VoteOutcome.COUNTS,
        ("lena",),
        2,
    )
    record = record.with_votes([_vote("lena", groups=LEADS, minutes=10)])
    assert vote_effect(record, _vote("lena", groups=LEADS, minutes=11)).refusal is VoteRefusal.ALREADY_VOTED
    assert vote_effect(record, _vote("fred", groups=FINANCE, minutes=11)).refusal is VoteRefusal.NOT_ELIGIBLE
    second = vote_effect(record, _vote("luke", groups=LEADS | FINANCE, minutes=30))
    assert second.outcome is VoteOutcome.ADVANCES
    progress = second.progress
    assert (progress.stage_index, progress.stage_name, progress.approvals, progress.eligible_groups) == (
        1,
        "finance",
        (),
        ("finance",),
    )
    assert progress.stages[0].approvals == ("lena", "luke") and progress.stages[0].ended_at == _at(30)
    assert progress.current.started_at == _at(30) and progress.due_at is None
    record = record.with_votes([_vote("luke", groups=LEADS | FINANCE, minutes=30)])
    # Luke is in finance too, but decided the first stage: the rule counts him once.
    refused = vote_effect(record, _vote("luke", groups=LEADS | FINANCE, minutes=31))
    assert refused.refusal is VoteRefusal.COUNTED_IN_EARLIER_STAGE and refused.outcome is VoteOutcome.REFUSED
    last = vote_effect(record, _vote("fred", groups=FINANCE, minutes=40))
    assert (last.outcome, last.progress.complete, last.progress.stage_name) == (VoteOutcome.COMPLETES, True, "finance")


def test_one_principal_may_count_in_two_stages_when_the_rule_lets_them() -> None:
    rule = ReviewRule("r", (Stage("one", ("a",)), Stage("two", ("a",))), distinct_across_stages=False)
    record = _record(rule, _vote("ann", groups=frozenset({"a"})))
    assert vote_effect(record, _vote("ann", groups=frozenset({"a"}), minutes=2)).outcome is VoteOutcome.COMPLETES


def test_a_due_stage_escalates_and_then_admits_its_escalation_groups() -> None:
    on_call = frozenset({"on-call-leads"})
    record = _record(REFUND, _vote("lena", groups=LEADS, minutes=10))
    before = review_progress(record, _at(239))
    assert (before.due_at, before.is_due, before.should_escalate) == (_at(240), False, False)
    assert before.vote_refusal("olga", on_call) is VoteRefusal.NOT_ELIGIBLE
    due = review_progress(record, _at(240))
    assert (due.is_due, due.should_escalate, due.escalated, due.eligible_groups) == (
        True,
        True,
        False,
        ("support-leads",),
    )
    escalated = ReviewRecord(REFUND, record.authors, START, record.votes, (Escalation(0, _at(245)),))
    after = review_progress(escalated, _at(250))
    assert (after.escalated, after.should_escalate, after.eligible_groups) == (
        True,
        False,
        ("on-call-leads", "support-leads"),
    )
    assert review_progress(escalated, _at(244)).vote_refusal("olga", on_call) is VoteRefusal.NOT_ELIGIBLE
    assert review_progress(escalated, _at(245)).may_vote("olga", on_call)
    effect = vote_effect(escalated, Vote("olga", APPROVE, on_call, _at(250)))
    assert effect.outcome is VoteOutcome.ADVANCES
    # Olga's approval was eligible because the escalation came first; the replay agrees.
    assert review_progress(escalated.with_votes([Vote("olga", APPROVE, on_call, _at(250))]), _at(251)).stage_index == 1


def test_a_later_stage_is_due_counting_from_when_it_began() -> None:
    rule = ReviewRule("r", (Stage("one"), Stage("two", ("b",), due=timedelta(hours=1), escalate_to=("c",))))
    progress = review_progress(_record(rule, _vote("ann", minutes=90)), _at(100))
    assert (progress.stage_name, progress.due_at, progress.is_due) == ("two", _at(150), False)


def test_after_the_deadline_no_vote_counts_and_the_review_should_expire() -> None:
    record = _record(REFUND)
    progress = review_progress(record, _at(72 * 60))
    assert (progress.deadline_at, progress.past_deadline, progress.status) == (_at(72 * 60), True, ReviewStatus.OPEN)
    effect = vote_effect(record, _vote("lena", groups=LEADS, minutes=72 * 60))
    assert (effect.outcome, effect.refusal) == (VoteOutcome.REFUSED, VoteRefusal.PAST_DEADLINE)
    assert not review_progress(record, _at(72 * 60 - 1)).past_deadline


def test_declines_count_until_they_reach_declines_to_end() -> None:
    rule = ReviewRule("r", (Stage("one", approvals=3, declines_to_end=2),))
    record = _record(rule, _vote("ann", DECLINE), _vote("bob"))
    progress = review_progress(record, _at(5))
    assert (progress.declines, progress.approvals, progress.is_open) == (("ann",), ("bob",), True)
    assert vote_effect(record, _vote("cat", DECLINE, minutes=6)).outcome is VoteOutcome.DECLINES
    assert vote_effect(record, _vote("ann", APPROVE, minutes=6)).refusal is VoteRefusal.ALREADY_VOTED


def test_the_first_refusal_in_the_order_of_checks_is_the_one_given() -> None:
    record = _record(REFUND, _vote("lena", groups=LEADS))
    # An author outside every group is told about four-eyes, not about groups.
    assert review_progress(record, _at(2)).vote_refusal("alice", frozenset()) is VoteRefusal.AUTHOR
    assert review_progress(record, _at(72 * 60)).vote_refusal("alice", LEADS) is VoteRefusal.PAST_DEADLINE


@pytest.mark.parametrize(
    ("votes", "escalations", "index", "reason"),
    [
        ((_vote("alice"),), (), 0, "'alice' could not approve: an author of the proposal may not decide it"),
        ((_vote("lena", groups=LEADS), _vote("fred", groups=FINANCE, minutes=2)), (), 1, "'fred' could not approve"),
        ((_vote("lena", groups=LEADS), _vote("lena", DECLINE, LEADS, 2)), (), 1, "has already decided this stage"),
        (
            (_vote("olga", groups=frozenset({"on-call-leads"}), minutes=250),),
            (Escalation(0, _at(251)),),
            0,
            "'olga' could not approve: the principal is in none",
        ),
        ((), (Escalation(0, _at(239)),), None, "stage 'leads' is escalated at 2026-12-04 12:59:00+00:00, before"),
        ((), (Escalation(1, _at(300)),), None, "stage 'finance' does not escalate"),
        ((), (Escalation(2, _at(300)),), None, "the rule has no stage 2"),
        ((), (Escalation(0, _at(300)), Escalation(0, _at(301))), None, "stage 'leads' is escalated twice"),
    ],
)
def test_a_record_the_rule_would_have_refused_is_inconsistent(
    votes: tuple[Vote, ...], escalations: tuple[Escalation, ...], index: int | None, reason: str
) -> None:
    with pytest.raises(InconsistentReview) as refused:
        review_progress(_record(REFUND, *votes, escalations=escalations), _at(400))
    assert refused.value.vote_index == index
    assert reason in str(refused.value)


def test_an_escalation_of_a_stage_that_never_began_is_inconsistent() -> None:
    rule = ReviewRule("r", (Stage("one"), Stage("two", ("b",), due=timedelta(hours=1), escalate_to=("c",))))
    with pytest.raises(InconsistentReview, match="stage 'two' is escalated but never began"):
        review_progress(_record(rule, escalations=(Escalation(1, _at(100)),)), _at(200))


def test_a_vote_is_refused_a_decision_other_than_approve_or_decline_and_a_naive_time() -> None:
    with pytest.raises(ValueError, match="a vote approves or declines"):
        Vote("ann", Decision.UNSPECIFIED, frozenset(), START)
    with pytest.raises(ValueError, match="must be timezone-aware"):
        Vote("ann", APPROVE, frozenset(), datetime(2026, 1, 1))
