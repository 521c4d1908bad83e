"""One reconciliation pass: list open operations, look them up in batches, record what was learned,
re-drive what may be re-driven, and summarise what is left.

The pass lists UNKNOWN operations of any age first, then APPROVED ones older than the grace
period. UNKNOWN comes first because a re-driven APPROVED operation that stays unresolved
becomes UNKNOWN, and listing it again would examine it twice in one pass. Every lookup is
recorded with BatchSettleOperations, so an operator sees the last lookup of each operation;
only an APPLIED answer with its receipt moves one to COMMITTED.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import islice

from decisionflow.client import (
    DecisionflowError,
    LookupAnswer,
    NotRedrivable,
    OperationState,
    OperationView,
    Outcome,
    Settlement,
)
from decisionflow.vocabulary import OPEN_STATES, LookupStatus, OperationId
from reconciler.domain import (
    Action,
    OpenOperation,
    PassSettings,
    PassSummary,
    RedriveCounts,
    RedriveOutcome,
    Verdict,
    age_seconds,
    decide,
)
from reconciler.lookahead import Lookahead
from reconciler.ports import OperationsPort, ReceiverPort, answers_by_id, finding, open_operation, settlement

logger = logging.getLogger("decisionflow.reconciler")

# A pass that examines more than this many operations reports its progress every time it
# examines this many more, so a large backlog does not look like a hang.
PROGRESS_EVERY = 2000
REDRIVE_WORKERS = 8
# Batches listed and looked up ahead of the one being settled.
LOOKAHEAD_BATCHES = 2


@dataclass
class _Tally:
    examined: int = 0
    settled: int = 0
    already_settled: int = 0
    noted: int = 0
    escalated: int = 0
    lookup_failures: int = 0
    redrives: dict[RedriveOutcome, int] = field(default_factory=lambda: dict.fromkeys(RedriveOutcome, 0))
    # Every examined operation left open, for the ages in the summary.
    still_open: list[OpenOperation] = field(default_factory=list)
    next_progress: int = PROGRESS_EVERY


@dataclass
class _PassState:
    """What the listing side of a pass learned so far."""

    receiver_down: bool = False
    key_retention: timedelta | None = None
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class _LookedUp:
    """A batch of open operations with the receiver's answers (empty, with error, when the lookup failed)."""

    operations: list[OpenOperation]
    answers: dict[OperationId, LookupAnswer]
    error: str
    key_retention: timedelta | None


def _chunks(items: Iterator[OperationView], size: int) -> Iterator[list[OperationView]]:
    while chunk := list(islice(items, size)):
        yield chunk


class Reconciler:
    """Runs passes against the orchestrator's OperationsService and the receiver's BatchLookup."""

    def __init__(
        self,
        operations: OperationsPort,
        receiver: ReceiverPort,
        settings: PassSettings,
        *,
        clock: Callable[[], datetime],
        receiver_single_attempt: ReceiverPort | None = None,
        progress: Callable[[str], None] | None = None,
        lookup_latency: Callable[[float], None] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        timer: Callable[[], float] = time.monotonic,
        redrive_workers: int = REDRIVE_WORKERS,
    ) -> None:
        self._operations = operations
        self._receiver = receiver
        # After a batch lookup failed through all its retries, later batches of the pass try
        # once each: a receiver that is down must not stretch the pass by the retry budget per batch.
        self._receiver_single_attempt = receiver_single_attempt or receiver
        self._settings = settings
        self._clock = clock
        self._progress = progress
        self._lookup_latency = lookup_latency
        self._should_stop = should_stop
        self._timer = timer
        self._pool = ThreadPoolExecutor(max_workers=redrive_workers, thread_name_prefix="redrive")

    def close(self) -> None:
        """Wait for re-drives in flight and release the worker threads."""
        self._pool.shutdown(wait=True)

    def __enter__(self) -> Reconciler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_pass(self) -> PassSummary:
        """Reconcile every UNKNOWN operation and every APPROVED one older than the grace period, once.

        Raises DecisionflowError when the orchestrator cannot be reached or refuses: nothing can
        be recorded then. A receiver that cannot be reached is not an error of the pass: its
        operations stay open with the failed lookup noted.
        """
        started = self._timer()
        tally = _Tally()
        state = _PassState()
        batches = Lookahead(self._looked_up(state), depth=LOOKAHEAD_BATCHES)
        try:
            for batch in batches:
                self._record(batch, tally)
                self._report_progress(tally, started)
        finally:
            batches.close()
        return self._summary(tally, self._timer() - started, completed=not state.stopped)

    def _looked_up(self, state: _PassState) -> Generator[_LookedUp, None, None]:
        # Runs on the lookahead thread: it alone touches state until the generator ends.
        seen: set[OperationId] = set()
        listings = (
            (OperationState.UNKNOWN, timedelta(0)),
            (OperationState.APPROVED, self._settings.grace),
        )
        for listed_state, min_age in listings:
            listing = self._operations.list_operations(
                [listed_state], min_age=min_age, page_size=self._settings.batch_size
            )
            for chunk in _chunks(listing, self._settings.batch_size):
                if self._should_stop():
                    state.stopped = True
                    return
                batch: list[OpenOperation] = []
                for view in chunk:
                    operation = open_operation(view)
                    if operation is not None and operation.operation_id not in seen:
                        seen.add(operation.operation_id)
                        batch.append(operation)
                if batch:
                    answers, error = self._lookup([op.operation_id for op in batch], state)
                    yield _LookedUp(batch, answers, error, state.key_retention)

    def _lookup(
        self, operation_ids: list[OperationId], state: _PassState
    ) -> tuple[dict[OperationId, LookupAnswer], str]:
        receiver = self._receiver_single_attempt if state.receiver_down else self._receiver
        began = self._timer()
        try:
            batch = receiver.batch_lookup(operation_ids)
        except DecisionflowError as error:
            state.receiver_down = True
            logger.warning("batch lookup of %d operations failed: %s", len(operation_ids), error)
            return {}, f"{error.code.name}: {error.message}" if error.message else error.code.name
        finally:
            if self._lookup_latency is not None:
                self._lookup_latency(self._timer() - began)
        state.receiver_down = False
        state.key_retention = batch.key_retention
        return answers_by_id(batch), ""

    def _record(self, batch: _LookedUp, tally: _Tally) -> None:
        now = self._clock()
        verdicts: list[Verdict] = []
        settlements: list[Settlement] = []
        for operation in batch.operations:
            answer = batch.answers.get(operation.operation_id)
            found = finding(answer, batch.error)
            verdict = decide(
                operation,
                found,
                key_retention=batch.key_retention,
                now=now,
                redrive_enabled=self._settings.redrive_enabled,
                redrive_margin=self._settings.redrive_margin,
            )
            if found.status is LookupStatus.UNSPECIFIED:
                tally.lookup_failures += 1
            verdicts.append(verdict)
            settlements.append(settlement(operation.operation_id, answer, found, verdict))
        results = self._operations.batch_settle_operations(settlements)
        tally.examined += len(batch.operations)
        redrive: list[OpenOperation] = []
        for operation, verdict, result in zip(batch.operations, verdicts, results, strict=True):
            if result.settled:
                tally.settled += 1
            elif result.operation.state not in OPEN_STATES:
                tally.already_settled += 1
            elif verdict.action is Action.REDRIVE:
                redrive.append(operation)
            else:
                if verdict.action is Action.ESCALATE:
                    tally.escalated += 1
                    logger.warning("escalated %s: %s", operation.operation_id, verdict.reason)
                else:
                    tally.noted += 1
                tally.still_open.append(operation)
        for operation, outcome in zip(redrive, self._pool.map(self._redrive, redrive), strict=True):
            tally.redrives[outcome] += 1
            if outcome in (RedriveOutcome.UNKNOWN, RedriveOutcome.FAILED):
                tally.still_open.append(operation)

    def _redrive(self, operation: OpenOperation) -> RedriveOutcome:
        try:
            result = self._operations.redrive_operation(operation.operation_id)
        except NotRedrivable as error:
            # The operation left APPROVED/UNKNOWN: another reconciler or a replayed approval
            # settled it between our listing and now.
            logger.info("re-drive of %s refused, already %s", operation.operation_id, error.state.value)
            return RedriveOutcome.ALREADY_SETTLED
        except DecisionflowError as error:
            # Any other refusal, a precondition included, says nothing about the effect: the
            # operation stays open and the failure is counted.
            reason = f" ({error.reason})" if error.reason else ""
            logger.warning("re-drive of %s failed%s: %s", operation.operation_id, reason, error)
            return RedriveOutcome.FAILED
        return {
            Outcome.COMMITTED: RedriveOutcome.COMMITTED,
            Outcome.REJECTED: RedriveOutcome.REJECTED,
        }.get(result.outcome, RedriveOutcome.UNKNOWN)

    def _report_progress(self, tally: _Tally, started: float) -> None:
        if self._progress is None or tally.examined < tally.next_progress:
            return
        tally.next_progress = (tally.examined // PROGRESS_EVERY + 1) * PROGRESS_EVERY
        elapsed = max(self._timer() - started, 1e-9)
        self._progress(
            f"reconciler: examined {tally.examined} ({tally.examined / elapsed:.0f}/s): settled {tally.settled}, "
            f"re-driven {sum(tally.redrives.values())}, left open {len(tally.still_open)}"
        )

    def _summary(self, tally: _Tally, duration: float, completed: bool) -> PassSummary:
        now = self._clock()
        ages = [age_seconds(operation, now) for operation in tally.still_open]
        alert_after = self._settings.alert_after.total_seconds()
        r = tally.redrives
        return PassSummary(
            examined=tally.examined,
            settled=tally.settled,
            already_settled=tally.already_settled,
            redriven=RedriveCounts(
                committed=r[RedriveOutcome.COMMITTED],
                unknown=r[RedriveOutcome.UNKNOWN],
                rejected=r[RedriveOutcome.REJECTED],
                already_settled=r[RedriveOutcome.ALREADY_SETTLED],
                failed=r[RedriveOutcome.FAILED],
            ),
            noted=tally.noted,
            escalated=tally.escalated,
            lookup_failures=tally.lookup_failures,
            still_unknown=len(ages),
            oldest_unknown_age_seconds=round(max(ages), 3) if ages else None,
            unknown_older_than_alert=sum(1 for age in ages if age > alert_after),
            alert_after_seconds=alert_after,
            duration_seconds=duration,
            completed=completed,
        )
