"""The orchestrator's store against a plain model (tests/stores/orchestrator_model.py), on SQLite and PostgreSQL.

Hypothesis drives random sequences of start, replace, edit, approve, decline (with or without the
first attempt), attempt, re-drive by another holder, release, receipt, rejection, lookup notes,
settling and pruning across several cases, authors and reviewers, on a database that already holds
decided operations of other cases. After every step each row the store returned must equal the
model's answer and a fresh read; after every step the whole table of operations, the tally, the
reviewer's inbox and the audit log's entries (each decoded, with the ids it is found by) must equal
the model's. Every statement the run executed is then compiled for both
dialects and checked for a subquery column without its table (tests/support/sql_scopes.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule, run_state_machine_as_test

from decisionflow.vocabulary import CaseId, Consistency, Decision, LookupStatus, OperationId, Receipt
from orchestrator.domain import FirstAttempt, RecordedDecision, Settlement
from orchestrator.store import OrchestratorStore
from orchestrator.store import _statements as q
from tests.stores.orchestrator_steps import AUTHORS, BODIES, CASES, HOLDERS, REVIEWERS, StoreMachine, proposal, sealed
from tests.support.sql_scopes import recording, unqualified_statements


class OrchestratorStoreMachine(StoreMachine):
    """Random writes and reads against the store and the model side by side."""

    def __init__(self) -> None:
        super().__init__()
        self.leases: dict[OperationId, list[datetime]] = {}

    # Rules.

    @initialize()
    def decided_background(self) -> None:
        # Rows of other cases decided first, by other reviewers: an answer read from the wrong row shows.
        for n, decision in enumerate((Decision.DECLINE, Decision.APPROVE)):
            at = self.tick(1)
            p = proposal(f"B-{n}", BODIES[n], AUTHORS[n], at, None, False)
            [cp] = self.checkpoint_ids(1)
            self.both(
                lambda p=p, cp=cp, at=at: self.store.create_proposal(
                    p, self.review(p, cp), [sealed(cp, p.operation_id, at)]
                ),
                lambda p=p, cp=cp: self.model.create_proposal(p, self.review(p, cp), [cp], None),
            )
            decided = RecordedDecision(p.operation_id, decision, REVIEWERS[2 - n], self.tick(1))
            self.both(
                lambda d=decided, p=p: self.store.record_decision(d, p.case_id, []),
                lambda d=decided: self.model.record_decision(d, [], None),
            )

    @rule(
        case=st.sampled_from(CASES),
        body=st.sampled_from(BODIES),
        author=st.sampled_from(AUTHORS),
        wait=st.integers(0, 3),
        named=st.sampled_from(["none", "current", "other"]),
    )
    def start(self, case: str, body: str, author: str, wait: int, named: str) -> None:
        """StartReview's write, new or replacing (naming the current proposal, or one that is not)."""
        at = self.tick(wait)
        current = self.model.current(case)
        others = [op for op in self.operation_ids() if op != current]
        expected = {"none": None, "current": current, "other": others[0] if others else current}[named]
        p = proposal(case, body, author, at, expected, False)
        [cp] = self.checkpoint_ids(1)
        answer = self.both(
            lambda: self.store.create_proposal(p, self.review(p, cp), [sealed(cp, p.operation_id, at)], expected),
            lambda: self.model.create_proposal(p, self.review(p, cp), [cp], expected),
        )
        if answer is not None:
            assert self.store.get_proposal(p.operation_id) == answer[0]
            self.fresh(p.operation_id)

    @precondition(lambda self: bool(self.model.cases))
    @rule(data=st.data(), body=st.sampled_from(BODIES), author=st.sampled_from(AUTHORS), wait=st.integers(0, 3))
    def edit(self, data: st.DataObject, body: str, author: str, wait: int) -> None:
        """EditProposal's write, naming any proposal of the case (stale unless it is current)."""
        case = data.draw(st.sampled_from(sorted(self.model.cases)))
        ops = [op for op in self.operation_ids() if self.model.operations[op].case_id == case]
        expected = data.draw(st.sampled_from(ops))
        at = self.tick(wait)
        p = proposal(case, body, author, at, expected, True)
        [cp] = self.checkpoint_ids(1)
        answer = self.both(
            lambda: self.store.create_edit(p, expected, self.review(p, cp), [sealed(cp, p.operation_id, at)]),
            lambda: self.model.create_edit(p, expected, self.review(p, cp), [cp]),
        )
        if answer is not None:
            assert self.store.get_proposal(p.operation_id) == answer
            self.fresh(p.operation_id)

    @precondition(lambda self: bool(self.model.operations))
    @rule(
        data=st.data(),
        decision=st.sampled_from([Decision.APPROVE, Decision.DECLINE]),
        reviewer=st.sampled_from(REVIEWERS),
        with_attempt=st.booleans(),
        wait=st.integers(0, 3),
        lease=st.integers(1, 8),
    )
    def decide(
        self, data: st.DataObject, decision: Decision, reviewer: str, with_attempt: bool, wait: int, lease: int
    ) -> None:
        """Approve's or Decline's write; an approval may record its first attempt with it."""
        op = data.draw(st.sampled_from(self.operation_ids()))
        at = self.tick(wait)
        decided = RecordedDecision(OperationId(op), decision, reviewer, at)
        case_id = CaseId(self.model.operations[op].case_id)
        [cp] = self.checkpoint_ids(1)
        attempt = None
        if with_attempt and decision is Decision.APPROVE:
            attempt = (f"payload {op}".encode(), f"digest-{op[-8:]}", at + timedelta(seconds=lease), HOLDERS[0])
        first = None if attempt is None else FirstAttempt(attempt[0], attempt[1], attempt[2], attempt[3])
        answer = self.both(
            lambda: self.store.record_decision(decided, case_id, [sealed(cp, op, at)], first),
            lambda: self.model.record_decision(decided, [cp], attempt),
        )
        if attempt is not None and answer is not None:
            self.leases.setdefault(op, []).append(attempt[2])
        self.fresh(op)

    @precondition(lambda self: bool(self.model.operations))
    @rule(
        data=st.data(),
        holder=st.sampled_from(HOLDERS),
        wait=st.integers(0, 6),
        lease=st.integers(1, 8),
        ended=st.sampled_from([None, *HOLDERS]),
    )
    def attempt(self, data: st.DataObject, holder: str, wait: int, lease: int, ended: str | None) -> None:
        """An attempt (the first, a repeated Approve's, a re-drive by another holder once a lease passed,
        or a takeover of the lease of a holder known to have ended)."""
        op = data.draw(st.sampled_from(self.operation_ids()))
        at = self.tick(wait)
        until = at + timedelta(seconds=lease)
        payload, digest = f"payload {op} {holder}".encode(), f"digest-{holder[:6]}"
        answer = self.both(
            lambda: self.store.record_attempt(op, payload, digest, at, until, holder=holder, ended_holder=ended),
            lambda: self.model.record_attempt(op, payload, digest, at, until, holder, ended),
        )
        if answer is not None:
            self.leases.setdefault(op, []).append(until)
        self.fresh(op)

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """An attempt gives up its lease: the latest one (its holder), or an older one that has been taken since."""
        op = data.draw(st.sampled_from(sorted(self.leases)))
        until = data.draw(st.sampled_from(self.leases[op]))
        self.both(lambda: self.store.release_attempt(op, until), lambda: self.model.release_attempt(op, until))
        self.fresh(op)

    @precondition(lambda self: bool(self.model.operations))
    @rule(data=st.data(), wait=st.integers(0, 3))
    def receipt(self, data: st.DataObject, wait: int) -> None:
        """The receiver's receipt reaches the store (an open operation commits; others stay)."""
        op = data.draw(st.sampled_from(self.operation_ids()))
        at = self.tick(wait)
        receipt = Receipt(f"rcpt-{at.timestamp():.4f}", OperationId(op), at - timedelta(milliseconds=5))
        self.both(
            lambda: self.store.record_receipt(op, receipt, at), lambda: self.model.record_receipt(op, receipt, at)
        )
        self.fresh(op)

    @precondition(lambda self: bool(self.model.operations))
    @rule(data=st.data(), length=st.sampled_from([0, 12, 2500]), wait=st.integers(0, 3))
    def reject(self, data: st.DataObject, length: int, wait: int) -> None:
        """The receiver's definite refusal reaches the store."""
        op = data.draw(st.sampled_from(self.operation_ids()))
        at = self.tick(wait)
        reason = ("refused: " + "x" * length)[: max(length, 1)]
        self.both(
            lambda: self.store.record_rejection(op, reason, at), lambda: self.model.record_rejection(op, reason, at)
        )
        self.fresh(op)

    @precondition(lambda self: bool(self.model.operations))
    @rule(
        data=st.data(),
        wait=st.integers(0, 3),
        kinds=st.lists(st.sampled_from(["applied", "not_found", "eventual", "failed"]), min_size=1, max_size=4),
    )
    def settle(self, data: st.DataObject, wait: int, kinds: list[str]) -> None:
        """A reconciler pass records its lookups: some found applied, some not, some failed (plus an unknown id)."""
        ops = data.draw(st.lists(st.sampled_from(self.operation_ids()), min_size=1, max_size=len(kinds), unique=True))
        at = self.tick(wait)
        settlements = []
        for op, kind in zip(ops, kinds, strict=False):
            receipt = (
                Receipt(f"rcpt-l-{op[-6:]}", OperationId(op), at - timedelta(seconds=1)) if kind == "applied" else None
            )
            status = {"applied": LookupStatus.APPLIED, "failed": LookupStatus.UNSPECIFIED}.get(
                kind, LookupStatus.NOT_FOUND
            )
            consistency = {"eventual": Consistency.EVENTUAL, "failed": Consistency.UNSPECIFIED}.get(
                kind, Consistency.STRONG
            )
            error = "receiver unreachable" if kind == "failed" else ""
            settlements.append(Settlement(OperationId(op), status, consistency, receipt, error, at))
        settlements.append(
            Settlement(OperationId("op-v1-" + "0" * 64), LookupStatus.NOT_FOUND, Consistency.STRONG, None, "", at)
        )
        self.both(
            lambda: self.store.settle(settlements, settled_by="reconciler"),
            lambda: self.model.settle(settlements, "reconciler"),
        )
        for op in ops:
            self.fresh(op)

    @rule(back=st.integers(0, 20), dry_run=st.booleans())
    def prune(self, back: int, dry_run: bool) -> None:
        """Checkpoint pruning with a cutoff some seconds back (counted on a dry run)."""
        cutoff = self.now - timedelta(seconds=back)
        self.both(
            lambda: self.store.housekeeping.prune_checkpoints(cutoff, dry_run=dry_run),
            lambda: self.model.prune(cutoff, dry_run=dry_run),
        )


@pytest.mark.slow
def test_the_store_answers_what_the_model_holds(orchestrator_engine: sa.Engine, request: pytest.FixtureRequest) -> None:
    examples = request.config.getoption("--store-model-examples")
    OrchestratorStoreMachine.store = OrchestratorStore(orchestrator_engine)
    with recording(orchestrator_engine) as recorder:
        run_state_machine_as_test(
            OrchestratorStoreMachine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                derandomize=False,
            ),
        )
    # The background decisions alone run the approval's statements (on PostgreSQL with the decision's audit
    # entry riding on them): the check below saw them.
    decide = q.DECIDE_WITH_ENTRY if orchestrator_engine.dialect.name == "postgresql" else q.DECIDE
    assert str(decide) in recorder.statements and len(recorder.statements) > 10
    assert unqualified_statements(list(recorder.statements.values())) == []
