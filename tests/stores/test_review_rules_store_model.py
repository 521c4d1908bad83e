"""The orchestrator store's reviews under rules against a plain model (tests/stores/review_rules_model.py),
on SQLite and PostgreSQL.

Hypothesis drives, across several cases, proposals started, replaced and edited by several authors under
a few rules (the default one; two of three in one group; two stages, each escalating when due, under a
deadline; two approvals of anyone, then a group's), votes by reviewers of various groups (approve or
decline, eligible or not, authors, repeated, some cast from a clock 8 s behind), the decision each
ended review's last vote records, time advancing on the test's clock, the review timer's passes (its
paged list of reviews under rules, and its visit to each: escalate, expire or nothing) and the inbox as
each reviewer (or a reader who sees all) reads it, page by page (counted on the first), reroute-reviews
moving reviews to one of the rules (the default one too, dry runs as well: page by page as the
housekeeping does, or one operation of any state visited), and votes and decisions by calls that read a
review before it was re-routed (refused ReviewRerouted, nothing written). After each step every row
and value the store returned equals the model's answer and a fresh read (the operation, its votes, its
escalations, where its review stands); after every step the operations, the tally, the inbox, the
votes and escalations tables and the audit log's entries (vote, escalation, expiry and reroute leaves decoded)
equal the model's. Every statement run is then checked for a subquery column without its table.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule, run_state_machine_as_test

from decisionflow.review_rules import ReviewRule, Stage, VoteOutcome, default_rule
from decisionflow.vocabulary import CaseId, Decision, OperationId
from orchestrator.domain import PendingReviewFilter, Proposal, RecordedDecision
from orchestrator.schema import escalations, votes
from orchestrator.store import InboxKey, OrchestratorStore, Reader, RerouteOutcome, inbox_key
from tests.stores.orchestrator_steps import (
    ACTION,
    AUTHORS,
    BODIES,
    CASES,
    REVIEWERS,
    StoreMachine,
    proposal,
    sealed,
)
from tests.stores.review_rules_model import RuledStoreModel
from tests.support.sql_scopes import recording, unqualified_statements

LEADS, FINANCE, MANAGERS = "support-leads", "finance", "managers"
TWO_OF_THREE = ReviewRule(ACTION, (Stage("leads", (LEADS,), approvals=2, declines_to_end=2),))
TWO_STAGES = ReviewRule(
    ACTION,
    (
        Stage("leads", (LEADS,), due=timedelta(seconds=15), escalate_to=(MANAGERS,)),
        Stage("finance", (FINANCE,), due=timedelta(seconds=10), escalate_to=(LEADS, MANAGERS)),
    ),
    deadline=timedelta(seconds=60),
)
ANYONE_THEN_FINANCE = ReviewRule(
    ACTION,
    (Stage("anyone", approvals=2), Stage("finance", (FINANCE,), due=timedelta(seconds=20), escalate_to=(MANAGERS,))),
)
RULES = (None, TWO_OF_THREE, TWO_STAGES, ANYONE_THEN_FINANCE)
# The rules reroute-reviews is run with: the one the file gives the action, the default rule when it gives none.
REROUTE_TO = (default_rule(ACTION), TWO_OF_THREE, TWO_STAGES, ANYONE_THEN_FINANCE)
ENDING = (VoteOutcome.COMPLETES, VoteOutcome.DECLINES)
# Who votes, with the groups they hold: three leads (one also in finance), finance, a manager, a reviewer of
# no group, and an author of the proposals (never counted).
VOTERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("lee@example.com", frozenset({LEADS})),
    ("lin@example.com", frozenset({LEADS, FINANCE})),
    ("lou@example.com", frozenset({LEADS})),
    ("fay@example.com", frozenset({FINANCE})),
    ("max@example.com", frozenset({MANAGERS})),
    (REVIEWERS[0], frozenset()),
    (AUTHORS[0], frozenset({LEADS, FINANCE})),
)


class ReviewRulesStoreMachine(StoreMachine):
    """Reviews under rules: votes, timer passes and inbox reads against the store and the model side by side."""

    model: RuledStoreModel

    def __init__(self) -> None:
        super().__init__()
        # Per operation re-routed: its proposal and its rerouted_at as a call read them before each re-route.
        self.read_before: dict[OperationId, list[tuple[Proposal, datetime | None]]] = {}

    def new_model(self) -> RuledStoreModel:
        return RuledStoreModel()

    def ruled_ids(self) -> list[OperationId]:
        return [OperationId(op) for op in sorted(self.model.ruled)]

    def fresh_review(self, operation_id: OperationId) -> None:
        """A fresh read of the operation, its decision inputs, its votes, its escalations and where its review
        stands equals the model."""
        wanted = (self.model.operation(operation_id), self.model.progress(operation_id, self.now))
        assert self.store.operation_progress(operation_id, self.now) == wanted
        inputs = self.store.decision_inputs(operation_id)
        assert (inputs.operation, inputs.proposal) == (wanted[0], self.model.proposals[operation_id])
        assert inputs.current_operation_id == self.model.current(wanted[0].case_id)
        assert inputs.review == self.model.reviews[operation_id]
        assert self.store.votes(operation_id) == tuple(self.model.votes.get(operation_id, ()))
        assert self.store.escalations(operation_id) == self.model.escalations(operation_id)

    def cast_one(
        self, op: OperationId, principal: str, groups: frozenset[str], decision: Decision, now: datetime, commit: bool
    ) -> None:
        """One vote, with the proposal as stored; the vote that ends the review records its decision if commit."""
        p = self.model.proposals[op]
        cast = self.both(
            lambda: self.store.cast_vote(p, principal, decision, groups, now),
            lambda: self.model.cast_vote(op, principal, decision, groups, now),
        )
        if commit and cast is not None and cast.written and cast.effect.outcome in ENDING:
            final = Decision.APPROVE if cast.effect.outcome is VoteOutcome.COMPLETES else Decision.DECLINE
            decided = RecordedDecision(op, final, principal, cast.vote.at)
            rerouted_at = self.model.operations[op].rerouted_at
            self.both(
                lambda: self.store.record_decision(decided, p.case_id, [], rerouted_at=rerouted_at),
                lambda: self.model.record_decision(decided, [], None, rerouted_at),
            )

    # Rules.

    @initialize()
    def background(self) -> None:
        # A review of another case under a rule, its first stage approved: a vote or a stage read from the
        # wrong row shows.
        at = self.tick(1)
        p = proposal("B-0", BODIES[0], AUTHORS[1], at, None, False, TWO_STAGES)
        [cp] = self.checkpoint_ids(1)
        self.both(
            lambda: self.store.create_proposal(p, self.review(p, cp), [sealed(cp, p.operation_id, at)]),
            lambda: self.model.create_proposal(p, self.review(p, cp), [cp], None),
        )
        lee, groups = VOTERS[0]
        stored = self.store.get_proposal(p.operation_id)
        self.both(
            lambda: self.store.cast_vote(stored, lee, Decision.APPROVE, groups, at),
            lambda: self.model.cast_vote(p.operation_id, lee, Decision.APPROVE, groups, at),
        )

    @rule(
        case=st.sampled_from(CASES),
        body=st.sampled_from(BODIES),
        author=st.sampled_from(AUTHORS),
        wait=st.integers(0, 5),
        named=st.sampled_from(["none", "current"]),
        review_rule=st.sampled_from(RULES),
    )
    def start(self, case: str, body: str, author: str, wait: int, named: str, review_rule: ReviewRule | None) -> None:
        """StartReview's write under a rule, new or replacing the current proposal (the same content again
        returns the first proposal, under the rule it was recorded with)."""
        at = self.tick(wait)
        expected = self.model.current(case) if named == "current" else None
        p = proposal(case, body, author, at, expected, False, review_rule)
        [cp] = self.checkpoint_ids(1)
        answer = self.both(
            lambda: self.store.create_proposal(p, self.review(p, cp), [sealed(cp, p.operation_id, at)], expected),
            lambda: self.model.create_proposal(p, self.review(p, cp), [cp], expected),
        )
        if answer is not None:
            self.fresh_review(p.operation_id)

    @precondition(lambda self: bool(self.model.cases))
    @rule(
        data=st.data(),
        body=st.sampled_from(BODIES),
        author=st.sampled_from(AUTHORS),
        wait=st.integers(0, 5),
        review_rule=st.sampled_from(RULES),
    )
    def edit(self, data: st.DataObject, body: str, author: str, wait: int, review_rule: ReviewRule | None) -> None:
        """EditProposal's write of the case's current proposal: its authors carried, its rule the one in force."""
        case = data.draw(st.sampled_from(sorted(self.model.cases)))
        expected = self.model.current(case)
        assert expected is not None
        at = self.tick(wait)
        p = proposal(case, body, author, at, expected, True, review_rule)
        [cp] = self.checkpoint_ids(1)
        answer = self.both(
            lambda: self.store.create_edit(p, expected, self.review(p, cp), [sealed(cp, p.operation_id, at)]),
            lambda: self.model.create_edit(p, expected, self.review(p, cp), [cp]),
        )
        if answer is not None:
            self.fresh_review(p.operation_id)

    @precondition(lambda self: bool(self.model.ruled))
    @rule(
        data=st.data(),
        cast=st.lists(
            st.tuples(
                st.sampled_from(VOTERS),
                st.sampled_from([Decision.APPROVE, Decision.APPROVE, Decision.DECLINE]),
                st.integers(0, 12),
                st.sampled_from([0, 8]),
            ),
            min_size=1,
            max_size=3,
        ),
        commit=st.sampled_from([True, True, True, False]),
    )
    def vote(
        self,
        data: st.DataObject,
        cast: list[tuple[tuple[str, frozenset[str]], Decision, int, int]],
        commit: bool,
    ) -> None:
        """Votes on one review under a rule (its proposal as stored; mostly one in the inbox), each some seconds
        after the last, from the test's clock or one 8 s behind it (a replica's): counted, advancing, ending,
        refused, or a second vote of its principal. The vote that ends a review then records its decision,
        unless its reply was lost."""
        listed = [
            e.proposal.operation_id
            for e in self.model.pending_reviews()
            if e.proposal.rule is not None and self.model.ruled[e.proposal.operation_id].outcome is None
        ]
        mostly_listed = bool(listed) and data.draw(st.sampled_from([True, True, True, False]), label="listed")
        op = data.draw(st.sampled_from(listed if mostly_listed else self.ruled_ids()))
        for (principal, groups), decision, wait, behind in cast:
            self.cast_one(op, principal, groups, decision, self.tick(wait) - timedelta(seconds=behind), commit)
        self.fresh_review(op)

    def undecided_ended(self) -> list[OperationId]:
        """Operations without a decision whose review is under the default rule or was ended by its votes."""
        undecided = [op for op in self.operation_ids() if op not in self.model.decisions]
        return [op for op in undecided if op not in self.model.ruled or self.model.ruled[op].outcome is not None]

    @precondition(lambda self: bool(self.undecided_ended()))
    @rule(data=st.data(), wait=st.integers(0, 5), decision=st.sampled_from([Decision.APPROVE, Decision.DECLINE]))
    def decide(self, data: st.DataObject, wait: int, decision: Decision) -> None:
        """A decision under the default rule (stale when no longer current), or the one a review's votes reached,
        recorded later (the vote's reply lost, a replay drives it on)."""
        op = data.draw(st.sampled_from(self.undecided_ended()))
        review = self.model.ruled.get(op)
        reviewer = REVIEWERS[1]
        if review is not None:
            reviewer = self.model.votes[op][-1].principal
            decision = Decision.APPROVE if review.outcome is VoteOutcome.COMPLETES else Decision.DECLINE
        decided = RecordedDecision(op, decision, reviewer, self.tick(wait))
        case_id = CaseId(self.model.operations[op].case_id)
        rerouted_at = self.model.operations[op].rerouted_at
        self.both(
            lambda: self.store.record_decision(decided, case_id, [], rerouted_at=rerouted_at),
            lambda: self.model.record_decision(decided, [], None, rerouted_at),
        )
        self.fresh_review(op)

    def reroute_one(self, op: OperationId, to: ReviewRule, now: datetime, dry_run: bool) -> bool:
        """reroute-reviews' visit to one operation: its outcome equals the model's, and so does a fresh read.
        Return whether it moved the review."""
        read = (self.model.proposals[op], self.model.operations[op].rerouted_at)
        visit = self.both(
            lambda: self.store.reroute(op, to, now, dry_run=dry_run),
            lambda: self.model.reroute(op, to, now, dry_run),
        )
        moved = visit.outcome is RerouteOutcome.REROUTED and not dry_run
        if moved:
            self.read_before.setdefault(op, []).append(read)
        self.fresh_review(op)
        return moved

    def call_as_read(
        self,
        op: OperationId,
        read: tuple[Proposal, datetime | None],
        voter: tuple[str, frozenset[str]],
        decision: Decision,
        how: str,
        now: datetime,
    ) -> None:
        """A call that read the review (its proposal and rerouted_at) before a re-route votes with the proposal
        it read, or records its decision with the rerouted_at it read: each answer equals the model's."""
        proposal_read, rerouted_at = read
        principal, groups = voter
        moved = proposal_read.rule != self.model.proposals[op].rule
        if how == "vote" and (moved or op in self.model.ruled):
            self.both(
                lambda: self.store.cast_vote(proposal_read, principal, decision, groups, now),
                lambda: self.model.cast_vote(op, principal, decision, groups, now, proposal_read),
            )
        else:
            decided = RecordedDecision(op, decision, principal, now)
            # Each re-route is at a later time than the last, so the rerouted_at read is never the one stored.
            assert self.model.operations[op].rerouted_at != rerouted_at
            answer = self.both(
                lambda: self.store.record_decision(decided, proposal_read.case_id, [], rerouted_at=rerouted_at),
                lambda: self.model.record_decision(decided, [], None, rerouted_at),
            )
            assert answer is None
        self.fresh_review(op)

    @rule(
        data=st.data(),
        to=st.sampled_from(REROUTE_TO),
        dry_run=st.sampled_from([False, False, True]),
        wait=st.integers(1, 20),
        limit=st.integers(1, 3),
        one=st.sampled_from([False, False, True]),
    )
    def reroute(self, data: st.DataObject, to: ReviewRule, dry_run: bool, wait: int, limit: int, one: bool) -> None:
        """reroute-reviews with one of the rules, a dry run or not, at a later time on the test's clock: the
        candidates page by page (each equal to the model's), each visited, as the housekeeping pages them; or
        one operation of any state visited (decided, expired, superseded, on the rule already, voted on,
        escalated, or moved). Then, often, a call that read one of the reviews moved just before decides."""
        now = self.tick(wait)
        moved: list[OperationId] = []
        if one:
            op = data.draw(st.sampled_from(self.operation_ids()))
            moved = [op] if self.reroute_one(op, to, now, dry_run) else []
        else:
            after: OperationId | None = None
            while page := self.store.reroute_candidates(to, after, limit):
                assert page == self.model.reroute_candidates(to, after, limit)
                moved += [op for op in page if self.reroute_one(op, to, now, dry_run)]
                after = page[-1]
            assert self.model.reroute_candidates(to, after, limit) == ()
        if bool(moved) and data.draw(st.booleans(), label="decided as read before"):
            op = data.draw(st.sampled_from(moved))
            voter = data.draw(st.sampled_from(VOTERS))
            decision = data.draw(st.sampled_from([Decision.APPROVE, Decision.DECLINE]))
            how = data.draw(st.sampled_from(["vote", "decide"]))
            self.call_as_read(op, self.read_before[op][-1], voter, decision, how, self.tick(1))

    @precondition(lambda self: bool(self.read_before))
    @rule(
        data=st.data(),
        voter=st.sampled_from(VOTERS),
        decision=st.sampled_from([Decision.APPROVE, Decision.DECLINE]),
        wait=st.integers(0, 5),
        how=st.sampled_from(["vote", "decide"]),
    )
    def decide_as_read_before(
        self,
        data: st.DataObject,
        voter: tuple[str, frozenset[str]],
        decision: Decision,
        wait: int,
        how: str,
    ) -> None:
        """A call that read a review before one of its re-routes, any step later: refused ReviewRerouted with
        nothing written (a decided, superseded or expired review refused as such first; a vote counted when the
        review is back on the rule read)."""
        op = data.draw(st.sampled_from(sorted(self.read_before)))
        read = data.draw(st.sampled_from(self.read_before[op]))
        self.call_as_read(op, read, voter, decision, how, self.tick(wait))

    @rule(data=st.data(), wait=st.integers(0, 30), behind=st.sampled_from([0, 8]), limit=st.integers(1, 3))
    def timer_pass(self, data: st.DataObject, wait: int, behind: int, limit: int) -> None:
        """One pass of the review timer, at a time from its clock (perhaps 8 s behind): the open reviews
        under rules, page by page, each visited (escalated when due, expired past its deadline, else left);
        then a visit to any operation (one decided, expired or under the default rule is left alone)."""
        now = self.tick(wait) - timedelta(seconds=behind)
        after: OperationId | None = None
        while True:
            page = self.store.reviews_under_rules(after, limit)
            assert page == self.model.under_rules(after, limit)
            for op in page:
                visit = self.both(
                    lambda op=op: self.store.act_on_time(op, now), lambda op=op: self.model.act_on_time(op, now)
                )
                if visit.act is not None:
                    self.fresh_review(op)
            if len(page) < limit:
                break
            after = page[-1]
        op = data.draw(st.sampled_from(self.operation_ids()))
        self.both(lambda: self.store.act_on_time(op, now), lambda: self.model.act_on_time(op, now))

    @rule(
        reader=st.sampled_from([None, *VOTERS]),
        ahead=st.sampled_from([0, 0, 45, 200]),
        limit=st.integers(1, 4),
    )
    def inbox(self, reader: tuple[str, frozenset[str]] | None, ahead: int, limit: int) -> None:
        """The inbox as one reviewer (or a reader who sees all) reads it, at the clock's time or later, page by
        page, counted on the first: each page and the count equal the model's."""
        now = self.now + timedelta(seconds=ahead)
        principal, groups = (None, frozenset[str]()) if reader is None else reader
        seen = self.model.seen(principal, groups, now)
        as_read = Reader(principal or "", groups, sees_all=principal is None)
        after: InboxKey | None = None
        for start in range(0, len(seen) + 1, limit):
            listing = self.store.pending_reviews_listing(
                PendingReviewFilter(), limit, after, counted=start == 0, reader=as_read, now=now
            )
            assert listing.rows == tuple(seen[start : start + limit])
            assert listing.total_size == (len(seen) if start == 0 else None)
            if not listing.rows:
                return
            after = inbox_key(listing.rows[-1])

    # After every step (besides the operations, the inbox and the audit log): the votes and escalations.

    @invariant()
    def votes_and_escalations_match(self) -> None:
        with self.store.engine.connect() as conn:
            cast = conn.execute(sa.select(votes).order_by(votes.c.vote_id)).all()
            escalated = conn.execute(
                sa.select(escalations).order_by(escalations.c.operation_id, escalations.c.stage_index)
            ).all()
        rows = [(r.operation_id, r.principal, r.decision, r.groups, r.stage_index, r.voted_at) for r in cast]
        assert rows == self.model.vote_rows
        assert [(r.operation_id, r.stage_index, r.escalated_at) for r in escalated] == self.model.escalation_rows()


@pytest.mark.slow
def test_reviews_under_rules_answer_what_the_model_holds(
    orchestrator_engine: sa.Engine, request: pytest.FixtureRequest
) -> None:
    examples = request.config.getoption("--store-model-examples")
    ReviewRulesStoreMachine.store = OrchestratorStore(orchestrator_engine)
    with recording(orchestrator_engine) as recorder:
        run_state_machine_as_test(
            ReviewRulesStoreMachine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=20,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                derandomize=False,
            ),
        )
    assert len(recorder.statements) > 10
    assert unqualified_statements(list(recorder.statements.values())) == []
