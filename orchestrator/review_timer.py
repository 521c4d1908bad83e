"""The review timer: a periodic job that escalates stages past their due time and expires reviews past
their rule's deadline (docs/review-rules.md, "Escalation and expiry").

Each run reads the open reviews under a rule other than the default one, ``batch`` ids per read, and
hands each to ``OrchestratorStore.act_on_time`` at the injected clock's now: that transaction, under
the lock a vote takes, expires a review past its deadline with no decision recorded (state EXPIRED and
its ``expiry`` leaf, as the operators' ``expire-reviews`` writes it) or records the escalation of a due
stage (a row of ``escalations`` and its ``escalation`` leaf), or writes nothing. Reviews under the
default rule have no due time and no deadline, and are never read.

One runner at a time across replicas and worker processes (``single_runner``); a replica that finds
the lock held skips its run. The exclusion only spares work: two runners would still write each act
once, because each is decided again under the operation's lock. A run reports what it did
(``TimerRun``) to the metrics and logs one line per escalation and per expiry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.engine import Engine

from decisionflow.vocabulary import OperationId
from decisionflow_server.runtime.periodic import PeriodicJob, PeriodicMetrics, Schedule, single_runner
from orchestrator.store import OrchestratorStore, TimedAct, TimerVisit

logger = logging.getLogger("decisionflow.orchestrator")

JOB = "review-timer"
# Up to this many seconds more between runs, so replicas started together do not all try at once.
JITTER_FRACTION = 0.2


@dataclass(frozen=True, slots=True)
class TimerRun:
    """What one run did: the reviews it read, escalated and expired, and the open reviews left past their
    current stage's due time (how many, and the seconds the longest-overdue is past it; 0 for none)."""

    visited: int = 0
    escalated: tuple[OperationId, ...] = ()
    expired: tuple[OperationId, ...] = ()
    overdue: int = 0
    oldest_overdue_seconds: float = 0.0


@dataclass(slots=True)
class _Tally:
    visited: int = 0
    escalated: list[OperationId] = field(default_factory=list)
    expired: list[OperationId] = field(default_factory=list)
    overdue: list[float] = field(default_factory=list)

    def add(self, visit: TimerVisit, now: datetime) -> None:
        self.visited += 1
        if visit.act is TimedAct.ESCALATED:
            self.escalated.append(visit.operation_id)
        elif visit.act is TimedAct.EXPIRED:
            self.expired.append(visit.operation_id)
            return
        progress = visit.progress
        if progress is not None and progress.is_due and progress.due_at is not None:
            self.overdue.append(max(0.0, (now - progress.due_at).total_seconds()))

    def run(self) -> TimerRun:
        oldest = max(self.overdue, default=0.0)
        return TimerRun(self.visited, tuple(self.escalated), tuple(self.expired), len(self.overdue), oldest)


def act_on_reviews(store: OrchestratorStore, now: datetime, *, batch: int) -> TimerRun:
    """Escalate every due stage and expire every review past its deadline among the open reviews under a
    rule, at now, each in its own transaction; log one line per act."""
    tally = _Tally()
    after: OperationId | None = None
    while True:
        page = store.reviews_under_rules(after, batch)
        for operation_id in page:
            visit = store.act_on_time(operation_id, now)
            tally.add(visit, now)
            _log(visit)
        if len(page) < batch:
            return tally.run()
        after = page[-1]


def _log(visit: TimerVisit) -> None:
    progress = visit.progress
    if visit.act is None or progress is None:
        return
    extra = {"service": "orchestrator", "operation_id": visit.operation_id, "case_id": visit.case_id}
    if visit.act is TimedAct.ESCALATED:
        logger.info(
            "review escalated: stage %d (%s) was due at %s; %s may decide it too",
            progress.stage_index + 1,
            progress.stage_name,
            progress.due_at.isoformat() if progress.due_at is not None else "-",
            ", ".join(progress.current.stage.escalate_to),
            extra=extra,
        )
    else:
        logger.info(
            "review expired: its rule's deadline %s passed without a decision",
            progress.deadline_at.isoformat() if progress.deadline_at is not None else "-",
            extra=extra,
        )


class ReviewTimer:
    """One run of ``act_on_reviews`` at the clock's now, in a worker thread; on_run hears what it did."""

    def __init__(
        self,
        store: OrchestratorStore,
        clock: Callable[[], datetime],
        *,
        batch: int,
        on_run: Callable[[TimerRun], None] = lambda run: None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._batch = batch
        self._on_run = on_run

    async def run_once(self) -> TimerRun:
        """Act on every open review under a rule once, at the clock's now."""
        done = await asyncio.to_thread(act_on_reviews, self._store, self._clock(), batch=self._batch)
        self._on_run(done)
        return done


def review_timer_job(
    store: OrchestratorStore,
    engine: Engine,
    clock: Callable[[], datetime],
    *,
    interval: float,
    batch: int,
    on_run: Callable[[TimerRun], None] = lambda run: None,
    metrics: PeriodicMetrics | None = None,
) -> PeriodicJob | None:
    """Return the server's review timer job (once at start, then every interval and up to a fifth of it
    more, one runner at a time across replicas), None when the interval is 0."""
    if interval <= 0:
        return None
    timer = ReviewTimer(store, clock, batch=batch, on_run=on_run)
    return PeriodicJob(
        JOB,
        timer.run_once,
        Schedule(interval, jitter=interval * JITTER_FRACTION),
        logger=logger,
        service="orchestrator",
        exclusion=single_runner(engine, JOB, database="orchestrator"),
        metrics=metrics,
    )
