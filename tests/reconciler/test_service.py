"""One pass against stand-ins at the service seam (OperationsPort, ReceiverPort), for the paths real
servers rarely take on demand: every re-drive outcome, a receiver down across many batches, a
settlement raced by another reconciler, progress lines, and a stop requested mid-pass."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from decisionflow import reasons
from decisionflow.client import (
    Consistency,
    Decision,
    LookupAnswer,
    LookupBatch,
    LookupStatus,
    NotRedrivable,
    OperationState,
    OperationView,
    Outcome,
    PreconditionFailed,
    Receipt,
    RedriveResult,
    Settlement,
    SettleResult,
    Unavailable,
)
from decisionflow.client.errors import error_class
from decisionflow.vocabulary import OperationId
from reconciler.domain import PassSettings
from reconciler.service import Reconciler

NOW = datetime(2026, 11, 29, 21, 0, tzinfo=UTC)
OPEN = (OperationState.APPROVED, OperationState.UNKNOWN)


def op_id(n: int) -> str:
    """A well-formed operation id numbered n."""
    return f"op-v1-{n:064x}"


def view(
    n: int, state: OperationState = OperationState.UNKNOWN, age: timedelta = timedelta(minutes=2)
) -> OperationView:
    """An open operation decided age ago."""
    at = NOW - age
    attempted = state is OperationState.UNKNOWN
    return OperationView(
        operation_id=op_id(n),
        case_id=f"C-{n}",
        state=state,
        decision=Decision.APPROVE,
        reviewer="rita",
        decided_at=at,
        receipt=None,
        attempts=1 if attempted else 0,
        first_attempt_at=at if attempted else None,
        rejection_reason="",
        last_lookup=None,
        updated_at=at,
    )


# Re-drive refusals that are preconditions but not NOT_REDRIVABLE: one the contract names, one a
# newer orchestrator might add.
PRECONDITIONS = {"version": reasons.WORKFLOW_VERSION_MISMATCH, "novel": "SOME_NEW_PRECONDITION"}


@dataclass
class Orchestrator:
    """OperationsPort stand-in: settles like the real store; re-drives as scripted per operation."""

    operations: dict[str, OperationView]
    redrive_as: dict[str, str] = field(default_factory=dict)
    committed_elsewhere: set[str] = field(default_factory=set)
    notes: dict[str, Settlement] = field(default_factory=dict)

    def list_operations(
        self, states: Iterable[OperationState] = (), *, min_age: timedelta | None = None, page_size: int = 0
    ) -> Iterator[OperationView]:
        wanted = set(states)
        for operation in sorted(self.operations.values(), key=lambda o: (o.updated_at, o.operation_id)):
            assert operation.updated_at is not None
            if operation.state in wanted and NOW - operation.updated_at >= (min_age or timedelta(0)):
                yield operation

    def batch_settle_operations(self, settlements: Sequence[Settlement]) -> tuple[SettleResult, ...]:
        results = []
        for s in settlements:
            self.notes[s.operation_id] = s
            current = self.operations[s.operation_id]
            if s.operation_id in self.committed_elsewhere:
                current = self._close(s.operation_id, OperationState.COMMITTED)
                results.append(SettleResult(current, False))
            elif s.status is LookupStatus.APPLIED and current.state in (
                OperationState.APPROVED,
                OperationState.UNKNOWN,
            ):
                results.append(SettleResult(self._close(s.operation_id, OperationState.COMMITTED), True))
            else:
                results.append(SettleResult(current, False))
        return tuple(results)

    def redrive_operation(self, operation_id: str) -> RedriveResult:
        how = self.redrive_as.get(operation_id, "commit")
        if how == "refuse":
            raise NotRedrivable(
                grpc.StatusCode.FAILED_PRECONDITION,
                "committed",
                reason=reasons.NOT_REDRIVABLE,
                metadata={reasons.OPERATION_ID: operation_id, reasons.STATE: "OPERATION_STATE_COMMITTED"},
            )
        if how in PRECONDITIONS:
            # A refusal as map_rpc_error builds it: the class by status and reason, never NotRedrivable.
            refused = error_class(grpc.StatusCode.FAILED_PRECONDITION, PRECONDITIONS[how])
            assert refused is not NotRedrivable and issubclass(refused, PreconditionFailed)
            raise refused(grpc.StatusCode.FAILED_PRECONDITION, f"refused: {how}", reason=PRECONDITIONS[how])
        if how == "fail":
            raise Unavailable(grpc.StatusCode.UNAVAILABLE, "receiver unreachable from the orchestrator", attempts=5)
        outcome, state = {
            "commit": (Outcome.COMMITTED, OperationState.COMMITTED),
            "reject": (Outcome.REJECTED, OperationState.REJECTED),
            "unknown": (Outcome.UNKNOWN, OperationState.UNKNOWN),
        }[how]
        return RedriveResult(outcome, self._close(operation_id, state))

    def _close(self, operation_id: str, state: OperationState) -> OperationView:
        self.operations[operation_id] = replace(self.operations[operation_id], state=state)
        return self.operations[operation_id]


@dataclass
class Receiver:
    """ReceiverPort stand-in: a set of applied ids, or down; counts its calls."""

    applied: set[str] = field(default_factory=set)
    down: bool = False
    calls: int = 0

    def batch_lookup(self, operation_ids: Sequence[str]) -> LookupBatch:
        self.calls += 1
        if self.down:
            raise Unavailable(grpc.StatusCode.UNAVAILABLE, "connection refused", attempts=5)
        answers = []
        for operation_id in operation_ids:
            if operation_id in self.applied:
                receipt = Receipt("rcpt-" + operation_id[-8:], OperationId(operation_id), NOW)
                answers.append(LookupAnswer(operation_id, LookupStatus.APPLIED, receipt, Consistency.STRONG, NOW))
            else:
                answers.append(LookupAnswer(operation_id, LookupStatus.NOT_FOUND, None, Consistency.STRONG, NOW))
        return LookupBatch(tuple(answers), None)


def reconciler(
    orchestrator: Orchestrator,
    receiver: Receiver,
    single: Receiver | None = None,
    *,
    alert_after: timedelta = timedelta(minutes=5),
) -> Reconciler:
    """A Reconciler over the stand-ins with a fixed clock, in batches of 10."""
    return Reconciler(
        orchestrator,
        receiver,
        PassSettings(grace=timedelta(seconds=30), alert_after=alert_after, batch_size=10),
        clock=lambda: NOW,
        receiver_single_attempt=single,
    )


def test_every_redrive_outcome_is_counted_and_what_stays_open_is_aged() -> None:
    operations = {op_id(n): view(n, age=timedelta(minutes=n)) for n in range(1, 6)}
    scripted = ["commit", "unknown", "reject", "refuse", "fail"]
    orchestrator = Orchestrator(operations, redrive_as={op_id(n): how for n, how in enumerate(scripted, 1)})
    with reconciler(orchestrator, Receiver(), alert_after=timedelta(minutes=3)) as r:
        summary = r.run_pass()
    counts = summary.redriven
    assert (counts.committed, counts.unknown, counts.rejected, counts.already_settled, counts.failed) == (1, 1, 1, 1, 1)
    # Left open: the one still unknown after its re-drive (2 min) and the one whose re-drive failed (5 min).
    assert (summary.still_unknown, summary.oldest_unknown_age_seconds, summary.unknown_older_than_alert) == (2, 300, 1)
    assert summary.alerting


def test_a_precondition_other_than_not_redrivable_is_a_failed_redrive_never_settled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    operations = {op_id(n): view(n, age=timedelta(minutes=n)) for n in range(1, 4)}
    scripted = {op_id(1): "version", op_id(2): "novel", op_id(3): "refuse"}
    orchestrator = Orchestrator(operations, redrive_as=scripted)
    with caplog.at_level("WARNING", logger="decisionflow.reconciler"), reconciler(orchestrator, Receiver()) as r:
        summary = r.run_pass()
    counts = summary.redriven
    assert (counts.already_settled, counts.failed, counts.committed) == (1, 2, 0)
    # The two refused for another precondition stay open, aged from their decision (1 and 2 minutes).
    assert (summary.still_unknown, summary.oldest_unknown_age_seconds) == (2, 120)
    assert orchestrator.operations[op_id(1)].state is OperationState.UNKNOWN
    assert orchestrator.operations[op_id(2)].state is OperationState.UNKNOWN
    failures = [record.getMessage() for record in caplog.records if "failed" in record.getMessage()]
    assert len(failures) == 2
    assert any(op_id(1) in line and reasons.WORKFLOW_VERSION_MISMATCH in line for line in failures)
    assert any(op_id(2) in line and "SOME_NEW_PRECONDITION" in line for line in failures)


def test_a_receiver_down_is_retried_once_per_pass_then_tried_once_per_batch() -> None:
    operations = {op_id(n): view(n) for n in range(35)}
    retrying, single = Receiver(down=True), Receiver(down=True)
    orchestrator = Orchestrator(operations)
    with reconciler(orchestrator, retrying, single) as r:
        summary = r.run_pass()
    assert (retrying.calls, single.calls) == (1, 3)
    assert (summary.examined, summary.lookup_failures, summary.still_unknown, summary.noted) == (35, 35, 35, 35)
    assert (summary.settled, summary.redriven.total) == (0, 0)
    note = orchestrator.notes[op_id(0)]
    assert note.status is LookupStatus.UNSPECIFIED and note.error == "UNAVAILABLE: connection refused"
    # The receiver comes back within the pass: the retrying client is used again from then on.
    single.down = False
    retrying.down = False
    retrying.calls = single.calls = 0
    with reconciler(Orchestrator({op_id(n): view(n) for n in range(35)}), retrying, single) as r:
        assert r.run_pass().redriven.committed == 35
    assert (retrying.calls, single.calls) == (4, 0)


def test_a_settlement_raced_by_another_reconciler_counts_as_already_settled() -> None:
    operations = {op_id(n): view(n) for n in range(4)}
    orchestrator = Orchestrator(operations, committed_elsewhere={op_id(0), op_id(1)})
    with reconciler(orchestrator, Receiver(applied={op_id(0), op_id(2)})) as r:
        summary = r.run_pass()
    # 0: applied, settled elsewhere first; 1: not found here, committed elsewhere; 2: settled here; 3: re-driven.
    assert (summary.settled, summary.already_settled, summary.redriven.committed, summary.still_unknown) == (1, 2, 1, 0)


def test_approved_operations_wait_out_the_grace_period() -> None:
    operations = {
        op_id(1): view(1, OperationState.APPROVED, age=timedelta(seconds=10)),
        op_id(2): view(2, OperationState.APPROVED, age=timedelta(minutes=5)),
    }
    orchestrator = Orchestrator(operations)
    with reconciler(orchestrator, Receiver()) as r:
        summary = r.run_pass()
    assert (summary.examined, summary.redriven.committed) == (1, 1)
    assert orchestrator.operations[op_id(1)].state is OperationState.APPROVED


def test_large_backlogs_report_progress() -> None:
    orchestrator = Orchestrator({op_id(n): view(n) for n in range(4500)})
    lines: list[str] = []
    r = Reconciler(
        orchestrator,
        Receiver(applied={op_id(n) for n in range(4500)}),
        PassSettings(batch_size=500),
        clock=lambda: NOW,
        progress=lines.append,
    )
    with r:
        assert r.run_pass().settled == 4500
    assert [line.split(" (")[0] for line in lines] == ["reconciler: examined 2000", "reconciler: examined 4000"]


def test_small_passes_are_quiet() -> None:
    lines: list[str] = []
    orchestrator = Orchestrator({op_id(n): view(n) for n in range(1999)})
    with Reconciler(orchestrator, Receiver(), PassSettings(), clock=lambda: NOW, progress=lines.append) as r:
        r.run_pass()
    assert lines == []


def test_a_stop_request_ends_the_pass_between_batches() -> None:
    orchestrator = Orchestrator({op_id(n): view(n) for n in range(50)})
    asked = iter([False, True])
    with Reconciler(
        orchestrator,
        Receiver(applied={op_id(n) for n in range(50)}),
        PassSettings(batch_size=10),
        clock=lambda: NOW,
        should_stop=lambda: next(asked, True),
    ) as r:
        summary = r.run_pass()
    assert not summary.completed
    assert summary.settled == summary.examined == 10


def test_batch_size_is_bounded_by_the_batch_apis() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        PassSettings(batch_size=1001)
