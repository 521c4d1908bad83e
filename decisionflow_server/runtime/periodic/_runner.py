"""The periodic loop: run, wait, run again, until stop (the contract is in the package docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from decisionflow_server.foundation.errors import Unavailable
from decisionflow_server.runtime.periodic._exclusion import Exclusion
from decisionflow_server.runtime.periodic._metrics import Outcome, PeriodicMetrics


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a job runs."""

    interval: float
    """Seconds from the end of one run to the start of the next (more than 0)."""
    jitter: float = 0.0
    """Up to this many seconds more, drawn afresh for each wait, so replicas started together drift apart."""
    first_run_at_start: bool = True
    """Run at once when started; False waits one interval (and jitter) first."""

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"a periodic job's interval must be more than 0 seconds, not {self.interval!r}")
        if not self.jitter >= 0:
            raise ValueError(f"a periodic job's jitter must be 0 or more seconds, not {self.jitter!r}")


@dataclass(frozen=True, slots=True)
class Wording:
    """What a job's log lines say (%-style templates, so the values stay apart in the record)."""

    paused: str
    """WARNING, once, when a run fails on a transient error: takes (reason, interval)."""
    resumed: str
    """INFO, once, when a run succeeds after transient failures: takes (failed runs,)."""
    failed: str
    """ERROR with the traceback, each time a run fails on any other exception: takes (interval,)."""

    @classmethod
    def of(cls, name: str) -> Wording:
        """The plain wording of the job name."""
        return cls(
            paused=f"{name}: paused, %s; trying again every %g s",
            resumed=f"{name}: resumed after %d failed runs",
            failed=f"{name} failed; trying again in %g s",
        )


class PeriodicJob:
    """Runs run() on schedule from start until stop, one run at a time (see the package docstring)."""

    def __init__(
        self,
        name: str,
        run: Callable[[], Awaitable[object]],
        schedule: Schedule,
        *,
        logger: logging.Logger,
        wording: Wording | None = None,
        service: str | None = None,
        transient: tuple[type[Exception], ...] = (Unavailable,),
        exclusion: Exclusion | None = None,
        metrics: PeriodicMetrics | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.name = name
        self.schedule = schedule
        self._run = run
        self._logger = logger
        self._wording = wording or Wording.of(name)
        self._extra = {} if service is None else {"service": service}
        self._transient = transient
        self._exclusion = exclusion
        self._metrics = metrics
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._draw = draw
        self._failed_runs = 0
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        if metrics is not None:
            metrics.declare(name)

    def start(self) -> None:
        """Start the loop on the running event loop (once)."""
        if self._task is not None or self._stopped:
            raise RuntimeError(f"periodic job {self.name} was started already")
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"periodic-{self.name}")

    async def stop(self) -> None:
        """Stop the loop: a wait ends at once, a run in flight is cancelled; return once the loop's task
        has ended (an exception it ended with is raised here, never lost)."""
        self._stopped = True
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def next_wait(self) -> float:
        """Seconds of the next wait: the interval and a fresh draw of the jitter."""
        return self.schedule.interval + self._draw() * self.schedule.jitter

    async def run_once(self) -> Outcome:
        """Run once now (under the exclusion, when set), log and count the outcome, and return it; raise
        only CancelledError."""
        started_at, started = self._clock(), self._monotonic()
        if self._metrics is not None:
            self._metrics.started(self.name, started_at)
        outcome = await self._attempt()
        if self._metrics is not None:
            self._metrics.finished(self.name, self._clock(), max(0.0, self._monotonic() - started), outcome)
        return outcome

    async def _attempt(self) -> Outcome:
        try:
            if self._exclusion is None:
                await self._run()
            else:
                held = await asyncio.to_thread(self._exclusion.try_hold)
                if held is None:
                    return "skipped"
                try:
                    await self._run()
                finally:
                    # Released even when the run is cancelled: the release is one statement (or a close).
                    await asyncio.to_thread(held.release)
        except self._transient as error:
            if not self._failed_runs:
                self._logger.warning(self._wording.paused, error, self.schedule.interval, extra=self._extra)
            self._failed_runs += 1
            return "unavailable"
        except Exception:
            self._logger.exception(self._wording.failed, self.schedule.interval, extra=self._extra)
            return "failed"
        if self._failed_runs:
            self._logger.info(self._wording.resumed, self._failed_runs, extra=self._extra)
            self._failed_runs = 0
        return "succeeded"

    async def _loop(self) -> None:
        if not self.schedule.first_run_at_start:
            await self._sleep(self.next_wait())
        while True:
            await self.run_once()
            await self._sleep(self.next_wait())
