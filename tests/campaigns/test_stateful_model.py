"""A Hypothesis state machine over the real services: start, edit, decide, retry, lose replies, crash, reconcile.

The receiver and the orchestrator run in process on fixed ports; "lose replies" restarts the
receiver with ``receiver.commit_then_lose_reply=raise`` (or without it again), "crash" restarts
the orchestrator (nothing in memory survives), "reconcile" runs one pass through the reconciler's
service API. After every step the invariants are checked against what the services report:
at most one effect per operation id; a decision never changes; COMMITTED ⇒ an effect with the
same receipt; DECLINED ⇒ no effect; an operation superseded while undecided is never approved.
Each rule also checks the answer it got against the model (replay, conflict, stale, outcome).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import hypothesis
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    get_state_machine_test,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from decisionflow.client import (
    ApproveResult,
    Decision,
    DecisionConflict,
    DecisionflowError,
    Outcome,
    StaleProposal,
)
from decisionflow.retry import NO_RETRY
from tests.campaigns.history import History
from tests.campaigns.inprocess import InProcessStack
from tests.campaigns.report import publish
from tests.campaigns.workload import Observed, Reviewer, check_history, observe
from tests.support.campaigns import CampaignOptions

LOSE_REPLIES = "receiver.commit_then_lose_reply=raise"
OUTCOMES = {Decision.APPROVE: (Outcome.COMMITTED, Outcome.UNKNOWN), Decision.DECLINE: (Outcome.DECLINED,)}
DECISIONS = st.sampled_from([Decision.APPROVE, Decision.DECLINE])
# Hypothesis favours argument-free rules: faults and reconciler passes wait this many reviewer
# steps, so the reviewers get their turns.
REVIEWER_STEPS_BETWEEN = 2


class ReviewModel(RuleBasedStateMachine):
    """The model: per case its operations in order and the current one; per operation its decision."""

    stack: ClassVar[InProcessStack]
    history: ClassVar[History]
    examples: ClassVar[Iterator[int]]
    steps: ClassVar[dict[str, int]]

    cases = Bundle("cases")

    def __init__(self) -> None:
        super().__init__()
        self.example = next(self.examples)
        if self.stack.receiver_failpoints:
            self.stack.start_receiver()  # each example begins without faults
        self.reviewer, self.channel = Reviewer.connect(
            f"model{self.example}", self.stack.orchestrator_target, self.history, timeout=0.8, policy=NO_RETRY
        )
        self.operations: dict[str, list[str]] = {}  # case → its operation ids, oldest first
        self.decided: dict[str, Decision] = {}
        self.receipts: dict[str, str] = {}
        self.stale: set[str] = set()
        self.quiet_steps = 0

    def teardown(self) -> None:
        """Close the reviewer's channel."""
        self.channel.close()

    def _count(self, step: str, *, spaced: bool = False) -> None:
        self.steps[step] = self.steps.get(step, 0) + 1
        self.quiet_steps = 0 if spaced else self.quiet_steps + 1

    def _tally(self, what: str) -> None:
        self.steps[what] = self.steps.get(what, 0) + 1

    def _quiet(self) -> bool:
        return self.quiet_steps >= REVIEWER_STEPS_BETWEEN

    def _observe(self) -> Observed:
        ops = [op for case_ops in self.operations.values() for op in case_ops]
        return observe(self.stack.receiver_target, self.stack.orchestrator_target, self.operations, ops)

    @initialize(target=cases)
    def begin(self) -> MultipleResults[str]:
        """Two cases under review from the first step on."""
        return multiple(self._start_case(), self._start_case())

    @rule(target=cases)
    def start(self) -> str:
        """Start a review of a new case."""
        return self._start_case()

    def _start_case(self) -> str:
        self._count("start")
        case = f"H{self.example}-{len(self.operations)}"
        op = self.reviewer.start(case) or self.reviewer.start(case)
        assert op is not None, f"StartReview failed: {self.reviewer.last_error}"
        self.operations[case] = [op]
        return case

    @rule(case=cases)
    def edit(self, case: str) -> None:
        """Edit the case's current proposal: a new operation becomes current."""
        self._count("edit")
        expected = self.operations[case][-1]
        new = self.reviewer.edit(case, expected, len(self.operations[case]))
        assert new is not None, f"EditProposal of the current proposal failed: {self.reviewer.last_error}"
        recorded = self._observe().operations[expected].decision
        if recorded is Decision.UNSPECIFIED:
            self.stale.add(expected)  # superseded while undecided: it must never be decided now
        self.operations[case].append(new)

    def _decide(self, op: str, case: str, decision: Decision) -> None:
        if op in self.stale:
            self._tally("decide_on_stale")
        answer = self.reviewer.decide(case, op, decision)
        known = self.decided.get(op)
        if isinstance(answer, ApproveResult):
            assert op not in self.stale, f"stale {op} was decided: {answer}"
            assert known in (None, decision), f"{op}: {decision} answered {answer.outcome} over {known}"
            assert answer.outcome in OUTCOMES[decision], answer
            if known is not None:
                assert answer.replay, f"{op}: a second {decision.value} was not a replay: {answer}"
            self.decided[op] = decision
            if answer.operation.receipt_id:
                assert self.receipts.setdefault(op, answer.operation.receipt_id) == answer.operation.receipt_id
        elif isinstance(answer, DecisionConflict):
            assert known is not None and known is not decision and answer.recorded_decision is known, answer
        elif isinstance(answer, StaleProposal):
            assert known is None and op != self.operations[case][-1], f"{op} refused as stale: {answer}"
        else:
            # Indeterminate (a deadline under lost replies): the invariants learn what was recorded.
            assert isinstance(answer, DecisionflowError) and not answer.definite, answer

    @rule(case=cases, decision=DECISIONS)
    def decide(self, case: str, decision: Decision) -> None:
        """Approve or decline the case's current operation."""
        self._count(decision.value.lower())
        self._decide(self.operations[case][-1], case, decision)

    @rule(case=cases, decision=DECISIONS)
    def decide_first(self, case: str, decision: Decision) -> None:
        """Decide the case's first operation, as an old browser tab would: stale once an edit replaced it."""
        self._count(f"{decision.value.lower()}_first")
        self._decide(self.operations[case][0], case, decision)

    @precondition(lambda self: bool(self.decided))
    @rule(pick=st.integers(0, 50))
    def retry(self, pick: int) -> None:
        """Send a recorded decision again, as a retry loop would: a replay."""
        self._count("retry")
        op = sorted(self.decided)[pick % len(self.decided)]
        case = next(c for c, ops in self.operations.items() if op in ops)
        self._decide(op, case, self.decided[op])

    @precondition(_quiet)
    @rule()
    def lose_replies(self) -> None:
        """Toggle the receiver between losing every reply after its commit and answering normally."""
        self._count("lose_replies", spaced=True)
        self.stack.start_receiver("" if self.stack.receiver_failpoints else LOSE_REPLIES)

    @precondition(_quiet)
    @rule()
    def crash(self) -> None:
        """Restart the orchestrator: only what it stored survives."""
        self._count("crash", spaced=True)
        self.stack.start_orchestrator()

    @precondition(_quiet)
    @rule()
    def reconcile(self) -> None:
        """One reconciler pass; without lost replies it must settle every open operation."""
        self._count("reconcile", spaced=True)
        summary = self.stack.reconcile()
        if not self.stack.receiver_failpoints:
            assert summary.still_unknown == 0 and summary.unknown_older_than_alert == 0, summary

    @invariant()
    def effects_match_decisions(self) -> None:
        """One effect at most; decisions never change; COMMITTED has its effect, DECLINED none; stale undecided."""
        if not self.operations:
            return
        observed = self._observe()
        effects = observed.effects_by_op()
        for op, view in observed.operations.items():
            stored = effects.get(op, [])
            assert len(stored) <= 1, f"{op}: {len(stored)} effects"
            if view.decision is not Decision.UNSPECIFIED:
                assert self.decided.setdefault(op, view.decision) is view.decision, f"{op}: decision changed"
            elif op in self.decided:
                raise AssertionError(f"{op}: decision {self.decided[op]} was lost")
            if view.state.value == "COMMITTED":
                assert stored and stored[0].receipt.receipt_id == view.receipt_id, f"{op}: COMMITTED, no effect"
                assert self.receipts.setdefault(op, stored[0].receipt.receipt_id) == stored[0].receipt.receipt_id
            if view.decision is not Decision.APPROVE:
                assert not stored, f"{op}: {view.state.value} yet an effect"
            if op in self.stale:
                assert view.decision is Decision.UNSPECIFIED and not stored, f"stale {op} was decided"


@pytest.mark.campaign
@pytest.mark.slow
def test_stateful_model(campaign: CampaignOptions, tmp_path: Path, history: History) -> None:
    """Random sequences of rules; every invariant holds after every step (bounded for CI)."""
    stack = InProcessStack(tmp_path)
    stack.start_receiver()
    stack.start_orchestrator()
    ReviewModel.stack, ReviewModel.history = stack, history
    ReviewModel.examples, ReviewModel.steps = itertools.count(), {}
    started = time.monotonic()
    test = get_state_machine_test(
        ReviewModel,
        settings=settings(
            max_examples=15,
            stateful_step_count=15,
            deadline=None,
            database=None,
            derandomize=campaign.seed is None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    if campaign.seed is not None:
        test = hypothesis.seed(campaign.seed)(test)
    try:
        try:
            test()
        except AssertionError as failure:
            failure.add_note(
                "replay: .venv/bin/pytest tests/campaigns/test_stateful_model.py -s --seed S (a failing run "
                "without --seed is deterministic: run it again)"
            )
            raise
        stack.start_receiver()  # faults stop
        stack.reconcile()
        result, observed = check_history(history, stack.receiver_target, stack.orchestrator_target)
    finally:
        stack.close()
    publish(
        "stateful_model",
        {
            "examples": next(ReviewModel.examples),
            "steps": sum(ReviewModel.steps.values()),
            "steps_by_rule": ",".join(f"{k}:{v}" for k, v in sorted(ReviewModel.steps.items())),
            "operations": result.operations,
            "effects": len(observed.effects),
            "duplicates_found": result.duplicates,
            "decisions_lost": result.decisions_lost,
            "violations": len(result.violations),
            "seconds": round(time.monotonic() - started, 1),
        },
    )
    assert result.holds, result.explain()
