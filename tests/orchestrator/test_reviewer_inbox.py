"""ListPendingReviews under a review rule, over real gRPC on SQLite and PostgreSQL: a reviewer is listed the
reviews under a rule they may decide now (eligible at the current stage, not voted, not an author), each
with its progress; an operator is listed every review with its progress; pages and total_size count what
the caller is listed; escalated reviews come first, then by due time, then oldest first, across pages."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from decisionflow.review_rules import Escalation, ReviewRecord, ReviewRule, Stage, review_progress
from decisionflow.v1 import review_pb2
from decisionflow.vocabulary import Role
from decisionflow_server.storage import db
from orchestrator.domain import PendingReviewEntry
from orchestrator.review_timer import ReviewTimer
from orchestrator.store import OrchestratorStore, inbox_order
from tests.support.rules_desk import ESCALATING, Desk, People, open_desk

PEOPLE = {
    "ava": ([Role.AUTHOR, Role.REVIEWER], ["support-leads"]),
    "lee": ([Role.REVIEWER], ["support-leads"]),
    "lou": ([Role.REVIEWER], ["support-leads"]),
    "fay": ([Role.REVIEWER], ["finance"]),
    "oli": ([Role.REVIEWER], []),
    "ops": ([Role.OPERATOR], []),
}


class Inboxes:
    """A desk serving the rule, and the inbox as each person is listed it."""

    def __init__(self, desk: Desk) -> None:
        self._desk = desk
        self.start = desk.start
        self.approve = desk.approve

    def listing(self, who: str, **request: object) -> review_pb2.ListPendingReviewsResponse:
        listed: review_pb2.ListPendingReviewsResponse = self._desk.call(
            who,
            "ListPendingReviews",
            review_pb2.ListPendingReviewsRequest(**request),  # type: ignore[arg-type]
        )
        return listed

    def proposal_progress(self, who: str, operation_id: str) -> review_pb2.ReviewProgress:
        request = review_pb2.GetProposalRequest(operation_id=operation_id)
        answer: review_pb2.GetProposalResponse = self._desk.call(who, "GetProposal", request)
        assert answer.operation.HasField("progress")
        return answer.operation.progress

    def of(self, who: str) -> dict[str, review_pb2.ReviewProgress]:
        """The case ids who is listed, each with its progress."""
        return {e.proposal.case_id: e.pending_review.progress for e in self.listing(who).entries}


@pytest.fixture
def inboxes(database_url: str, tmp_path: Path) -> Iterator[Inboxes]:
    """A stack on a fresh orchestrator database of each kind, with the rules file and a token per person."""
    with open_desk(tmp_path, PEOPLE, orchestrator_url=database_url) as desk:
        yield Inboxes(desk)


def test_each_reviewer_is_listed_what_they_may_decide_now(inboxes: Inboxes) -> None:
    op = inboxes.start("T-1")
    for who in ("lee", "lou"):
        progress = inboxes.of(who)["T-1"]
        assert (progress.stage_name, progress.stage_index, progress.stage_count) == ("leads", 0, 2)
        assert (list(progress.approvals_given), progress.approvals_needed) == ([], 2)
        assert list(progress.eligible_groups) == ["support-leads"]
    # Not in the stage's groups, or no groups at all, or the author (who holds the group): not listed.
    assert inboxes.of("fay") == inboxes.of("oli") == inboxes.of("ava") == {}
    assert list(inboxes.of("ops")["T-1"].approvals_given) == []

    inboxes.approve("lee", op)
    assert inboxes.of("lee") == {}  # voted
    assert list(inboxes.of("lou")["T-1"].approvals_given) == ["lee"]  # 1 of 2, by lee
    assert list(inboxes.of("ops")["T-1"].approvals_given) == ["lee"]
    assert inboxes.proposal_progress("oli", op) == inboxes.of("lou")["T-1"]  # GetProposal says the same

    inboxes.approve("lou", op)
    finance = inboxes.of("fay")["T-1"]
    assert (finance.stage_name, finance.stage_index, list(finance.approvals_given)) == ("finance", 1, [])
    assert inboxes.of("lee") == inboxes.of("lou") == inboxes.of("ava") == {}
    assert inboxes.of("ops")["T-1"].stage_name == "finance"

    inboxes.approve("fay", op)  # the last stage: decided, out of every inbox
    assert inboxes.of("fay") == inboxes.of("ops") == {}


def test_pages_and_total_size_count_what_the_caller_is_listed(inboxes: Inboxes) -> None:
    ops = [inboxes.start(f"T-{n}") for n in range(1, 6)]
    for op in ops[1:4]:
        inboxes.approve("lee", op)  # lee may no longer decide T-2, T-3, T-4

    walked: list[str] = []
    token = ""
    for _ in range(5):
        page = inboxes.listing("lee", page_size=1, page_token=token, include_total_size=True)
        assert page.total_size == 2
        walked += [e.proposal.case_id for e in page.entries]
        token = page.next_page_token
        if not token:
            break
    assert walked == ["T-1", "T-5"]  # a page reads on past the reviews lee may not decide

    assert inboxes.listing("lou", include_total_size=True).total_size == 5
    assert inboxes.listing("fay", include_total_size=True).total_size == 0
    everything = inboxes.listing("ops", page_size=2, include_total_size=True)
    assert everything.total_size == 5 and len(everything.entries) == 2


T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _entry(since: datetime, due: timedelta | None, escalated: bool = False) -> PendingReviewEntry:
    """A listed entry waiting since since, under a one-stage rule due after due, escalated a day in or not."""
    stage = Stage("support", ("support",), due=due, escalate_to=("leads",) if due else ())
    rule = ReviewRule("record_support_review", (stage,))
    escalations = (Escalation(0, since + timedelta(days=1)),) if escalated else ()
    progress = review_progress(ReviewRecord(rule, frozenset({"ava"}), since, (), escalations), T0 + timedelta(days=2))
    return PendingReviewEntry(_proposal(since), None, 1, since, progress)  # type: ignore[arg-type]


def _proposal(since: datetime) -> SimpleNamespace:
    """What the order reads of a proposal: its operation id (here one per time)."""
    return SimpleNamespace(operation_id=f"op-v1-{since:%H%M}")


def test_the_inbox_order_is_escalated_first_then_by_due_time_then_oldest() -> None:
    plain = PendingReviewEntry(_proposal(T0), None, 1, T0, None)  # type: ignore[arg-type]
    late = _entry(T0 + timedelta(minutes=1), timedelta(hours=8))
    soon = _entry(T0 + timedelta(minutes=2), timedelta(hours=1))
    escalated = _entry(T0 + timedelta(minutes=3), timedelta(hours=4), escalated=True)
    undated = _entry(T0 + timedelta(minutes=4), None)
    assert inbox_order([plain, late, soon, escalated, undated]) == [escalated, soon, late, plain, undated]


def test_an_escalated_review_enters_the_escalation_groups_inbox_marked_escalated(
    database_url: str, tmp_path: Path
) -> None:
    people: People = {"ava": ([Role.AUTHOR], []), "oli": ([Role.REVIEWER], ["on-call-leads"])}
    now = [datetime(2026, 12, 21, 9, 0, tzinfo=UTC)]
    engine = db.create_engine(database_url)
    try:
        with open_desk(tmp_path, people, ESCALATING, orchestrator_url=database_url, clock=lambda: now[0]) as desk:
            inboxes = Inboxes(desk)
            inboxes.start("T-1")
            now[0] += timedelta(hours=2)
            inboxes.start("T-2")
            timer = ReviewTimer(OrchestratorStore(engine), lambda: now[0], batch=10)
            assert inboxes.of("oli") == {}  # on-call-leads may decide neither before an escalation

            now[0] += timedelta(hours=3)  # T-1 an hour past due, T-2 not due yet
            assert len(asyncio.run(timer.run_once()).escalated) == 1
            listed = inboxes.listing("oli", include_total_size=True)
            assert [e.proposal.case_id for e in listed.entries] == ["T-1"] and listed.total_size == 1
            progress = listed.entries[0].pending_review.progress
            assert progress.escalated and list(progress.eligible_groups) == ["on-call-leads", "support-leads"]
            assert progress.due_time.ToDatetime(tzinfo=UTC) == datetime(2026, 12, 21, 13, 0, tzinfo=UTC)
    finally:
        engine.dispose()


# One lead's approval, then finance, due an hour after it began and then open to on-call-leads too.
LEADS_THEN_DUE_FINANCE = """\
version = 1

[[actions.record_support_review.stages]]
name = "leads"
groups = ["support-leads"]

[[actions.record_support_review.stages]]
name = "finance"
groups = ["finance"]
due = "1h"
escalate_to = ["on-call-leads"]
"""


def test_the_order_holds_across_pages(database_url: str, tmp_path: Path) -> None:
    people: People = {
        "ava": ([Role.AUTHOR], []),
        "lee": ([Role.REVIEWER], ["support-leads"]),
        "kim": ([Role.REVIEWER], ["finance", "support-leads"]),
        "ops": ([Role.OPERATOR], []),
    }
    now = [datetime(2026, 12, 21, 9, 0, tzinfo=UTC)]
    engine = db.create_engine(database_url)
    try:
        with open_desk(
            tmp_path, people, LEADS_THEN_DUE_FINANCE, orchestrator_url=database_url, clock=lambda: now[0]
        ) as desk:
            inboxes = Inboxes(desk)
            ops = {}
            for n in range(1, 7):  # T-1 the oldest
                ops[n] = inboxes.start(f"T-{n}")
                now[0] += timedelta(minutes=1)
            for n in (6, 5):  # the newest two reach finance first, due an hour later
                inboxes.approve("lee", ops[n])
                now[0] += timedelta(minutes=1)
            now[0] += timedelta(hours=1)
            timer = ReviewTimer(OrchestratorStore(engine), lambda: now[0], batch=10)
            assert set(asyncio.run(timer.run_once()).escalated) == {ops[6], ops[5]}
            inboxes.approve("lee", ops[3])  # finance, due in an hour, not escalated

            for who in ("kim", "ops"):
                walked: list[list[str]] = []
                token = ""
                while True:
                    page = inboxes.listing(who, page_size=2, page_token=token, include_total_size=True)
                    assert page.total_size == 6
                    walked.append([e.proposal.case_id for e in page.entries])
                    token = page.next_page_token
                    if not token:
                        break
                # Escalated by due time, then due by due time, then the rest oldest first; pages of two (a
                # full page leaves a token, so the listing ends on an empty one).
                assert walked == [["T-6", "T-5"], ["T-3", "T-1"], ["T-2", "T-4"], []], who
            escalated = [e.pending_review.progress.escalated for e in inboxes.listing("kim", page_size=3).entries]
            assert escalated == [True, True, False]
    finally:
        engine.dispose()
