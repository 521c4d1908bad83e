"""The periodic runner on a real event loop, with its clock, sleep and jitter injected: when it runs,
how it stops, what it logs and counts, and one runner at a time on real SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from decisionflow_server.foundation.errors import Unavailable
from decisionflow_server.runtime.periodic import PeriodicJob, PeriodicMetrics, Schedule, Wording, single_runner
from decisionflow_server.storage import db

LOGGER = "tests.periodic"


class Waits:
    """An injected sleep: records each wait, returns at once for the first ones, then parks the loop
    until cancelled (and notes that it was)."""

    def __init__(self, returning: int) -> None:
        self.waits: list[float] = []
        self.returning = returning
        self.parked = asyncio.Event()
        self.cancelled = False

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        if len(self.waits) <= self.returning:
            await asyncio.sleep(0)
            return
        self.parked.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def _counting() -> tuple[list[int], Callable[[], Awaitable[None]]]:
    runs: list[int] = []

    async def run() -> None:
        runs.append(len(runs) + 1)

    return runs, run


def _job(run: Callable[[], Awaitable[object]], schedule: Schedule, **kwargs: object) -> PeriodicJob:
    return PeriodicJob("test-job", run, schedule, logger=logging.getLogger(LOGGER), **kwargs)  # type: ignore[arg-type]


def test_it_runs_at_start_then_after_each_interval_and_its_jitter() -> None:
    draws = iter([0.0, 0.5, 1.0])

    async def scenario() -> tuple[list[int], Waits]:
        runs, run = _counting()
        waits = Waits(returning=2)
        job = _job(run, Schedule(10.0, jitter=4.0), sleep=waits, draw=lambda: next(draws))
        job.start()
        await waits.parked.wait()
        await job.stop()
        return runs, waits

    runs, waits = asyncio.run(scenario())
    assert runs == [1, 2, 3]  # at start, then after each of the two waits that returned
    assert waits.waits == [10.0, 12.0, 14.0]


def test_each_wait_is_the_interval_plus_at_most_the_jitter() -> None:
    job = _job(_counting()[1], Schedule(30.0, jitter=5.0), draw=random.Random(7).random)
    waits = [job.next_wait() for _ in range(1000)]
    assert all(30.0 <= wait < 35.0 for wait in waits)
    assert max(waits) - min(waits) > 4.5  # the jitter is drawn afresh for every wait


def test_a_job_told_not_to_run_at_start_waits_one_interval_first() -> None:
    async def scenario() -> tuple[list[int], Waits]:
        runs, run = _counting()
        waits = Waits(returning=0)
        job = _job(run, Schedule(0.5, first_run_at_start=False), sleep=waits)
        job.start()
        await waits.parked.wait()
        await job.stop()
        return runs, waits

    runs, waits = asyncio.run(scenario())
    assert (runs, waits.waits) == ([], [0.5])


@pytest.mark.parametrize(("interval", "jitter"), [(0.0, 0.0), (-1.0, 0.0), (1.0, -0.1), (float("nan"), 0.0)])
def test_a_schedule_refuses_an_interval_that_is_not_positive_or_a_negative_jitter(
    interval: float, jitter: float
) -> None:
    with pytest.raises(ValueError, match="periodic job's"):
        Schedule(interval, jitter=jitter)


def test_stop_during_a_wait_ends_the_wait_at_once_and_no_run_follows() -> None:
    async def scenario() -> tuple[list[int], Waits, bool]:
        runs, run = _counting()
        waits = Waits(returning=0)
        job = _job(run, Schedule(3600.0), sleep=waits)
        job.start()
        await waits.parked.wait()
        await job.stop()
        await asyncio.sleep(0.05)
        leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return runs, waits, not leftovers

    runs, waits, nothing_left = asyncio.run(scenario())
    assert runs == [1]
    assert waits.cancelled
    assert nothing_left


def test_stop_during_a_run_cancels_it_and_releases_the_lock(tmp_path: pytest.TempPathFactory) -> None:
    engine = db.create_engine(f"sqlite:///{tmp_path}/service.db")
    in_run = asyncio.Event()
    seen: list[str] = []

    async def run() -> None:
        in_run.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def scenario() -> None:
        job = _job(run, Schedule(3600.0), exclusion=single_runner(engine, "test-job", database="test"))
        job.start()
        await in_run.wait()
        assert single_runner(engine, "test-job", database="test").try_hold() is None  # held by the run
        await job.stop()

    asyncio.run(scenario())
    assert seen == ["cancelled"]
    held = single_runner(engine, "test-job", database="test").try_hold()
    assert held is not None
    held.release()
    engine.dispose()


def test_a_job_stopped_before_it_started_stops_and_cannot_start() -> None:
    async def scenario() -> None:
        job = _job(_counting()[1], Schedule(1.0))
        await job.stop()
        with pytest.raises(RuntimeError, match="started already"):
            job.start()

    asyncio.run(scenario())


def _messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str, bool]]:
    return [(r.levelno, r.getMessage(), r.exc_info is not None) for r in caplog.records if r.name == LOGGER]


def test_an_outage_is_one_warning_with_its_reason_and_one_line_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    outcomes = iter(["away", "away", "away", "ok"])

    async def run() -> None:
        if next(outcomes) == "away":
            raise Unavailable("test database unavailable: failing over")

    async def scenario() -> list[str]:
        job = _job(run, Schedule(2.0))
        return [await job.run_once() for _ in range(4)]

    caplog.set_level(logging.INFO, LOGGER)
    assert asyncio.run(scenario()) == ["unavailable", "unavailable", "unavailable", "succeeded"]
    assert _messages(caplog) == [
        (logging.WARNING, "test-job: paused, test database unavailable: failing over; trying again every 2 s", False),
        (logging.INFO, "test-job: resumed after 3 failed runs", False),
    ]


def test_any_other_error_is_logged_with_its_traceback_every_time_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> None:
        raise ValueError("a defect")

    async def scenario() -> Waits:
        waits = Waits(returning=2)
        job = _job(
            run,
            Schedule(5.0),
            sleep=waits,
            wording=Wording(paused="p %s %g", resumed="r %d", failed="the test job failed; again in %.0f s"),
        )
        job.start()
        await waits.parked.wait()
        await job.stop()
        return waits

    caplog.set_level(logging.INFO, LOGGER)
    asyncio.run(scenario())
    assert _messages(caplog) == [(logging.ERROR, "the test job failed; again in 5 s", True)] * 3


def test_metrics_of_the_last_run_and_the_runs_by_outcome() -> None:
    registry = CollectorRegistry()
    metrics = PeriodicMetrics(registry)
    clock = iter([1000.0, 1002.5, 1010.0, 1010.25])
    monotonic = iter([50.0, 52.5, 60.0, 60.25])
    outcomes = iter([Unavailable("away"), None])

    async def run() -> None:
        error = next(outcomes)
        if error is not None:
            raise error

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"periodic_job": "test-job", **labels})

    job = _job(run, Schedule(1.0), metrics=metrics, clock=lambda: next(clock), monotonic=lambda: next(monotonic))
    assert sample("decisionflow_periodic_runs_total", outcome="succeeded") == 0.0  # declared before any run
    assert sample("decisionflow_periodic_last_run_finished_timestamp_seconds") == 0.0

    assert asyncio.run(job.run_once()) == "unavailable"
    assert sample("decisionflow_periodic_last_run_started_timestamp_seconds") == 1000.0
    assert sample("decisionflow_periodic_last_run_finished_timestamp_seconds") == 1002.5
    assert sample("decisionflow_periodic_last_run_duration_seconds") == 2.5

    assert asyncio.run(job.run_once()) == "succeeded"
    assert sample("decisionflow_periodic_last_run_started_timestamp_seconds") == 1010.0
    assert sample("decisionflow_periodic_last_run_finished_timestamp_seconds") == 1010.25
    assert sample("decisionflow_periodic_last_run_duration_seconds") == 0.25
    counts = {o: sample("decisionflow_periodic_runs_total", outcome=o) for o in ("succeeded", "unavailable", "failed")}
    assert counts == {"succeeded": 1.0, "unavailable": 1.0, "failed": 0.0}


@pytest.fixture
def engines(database_url: str) -> Iterator[tuple[sa.Engine, sa.Engine]]:
    """Two engines on one database: two replicas of a service."""
    first, second = db.create_engine(database_url), db.create_engine(database_url)
    try:
        yield first, second
    finally:
        first.dispose()
        second.dispose()


def test_one_runner_at_a_time_across_replicas(engines: tuple[sa.Engine, sa.Engine]) -> None:
    registry = CollectorRegistry()
    metrics = PeriodicMetrics(registry)
    running: list[str] = []
    overlaps: list[tuple[str, ...]] = []

    async def scenario() -> tuple[str, str, str]:
        first_in, first_go = asyncio.Event(), asyncio.Event()

        def runner(name: str, gate: asyncio.Event | None) -> Callable[[], Awaitable[None]]:
            async def run() -> None:
                running.append(name)
                if len(running) > 1:
                    overlaps.append(tuple(running))
                if gate is not None:
                    first_in.set()
                    await gate.wait()
                running.remove(name)

            return run

        first = PeriodicJob(
            "relay",
            runner("first", first_go),
            Schedule(1.0),
            logger=logging.getLogger(LOGGER),
            exclusion=single_runner(engines[0], "relay", database="test"),
        )
        second = PeriodicJob(
            "relay",
            runner("second", None),
            Schedule(1.0),
            logger=logging.getLogger(LOGGER),
            exclusion=single_runner(engines[1], "relay", database="test"),
            metrics=metrics,
        )
        pending = asyncio.ensure_future(first.run_once())
        await first_in.wait()
        while_held = await second.run_once()
        first_go.set()
        return await pending, while_held, await second.run_once()

    assert asyncio.run(scenario()) == ("succeeded", "skipped", "succeeded")
    assert overlaps == []
    skipped = registry.get_sample_value(
        "decisionflow_periodic_runs_total", {"periodic_job": "relay", "outcome": "skipped"}
    )
    assert skipped == 1.0


def test_two_running_loops_on_one_database_never_run_together(engines: tuple[sa.Engine, sa.Engine]) -> None:
    inside: list[str] = []
    overlaps: list[int] = []
    runs: list[str] = []

    def runner(name: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            inside.append(name)
            overlaps.append(len(inside))
            runs.append(name)
            try:
                await asyncio.sleep(0.02)  # long enough for the other loop to try meanwhile
            finally:
                # A run the job's stop cancels has ended too: the other loop may run while this one stops.
                inside.remove(name)

        return run

    async def scenario() -> None:
        jobs = [
            PeriodicJob(
                "relay",
                runner(name),
                Schedule(0.005),
                logger=logging.getLogger(LOGGER),
                exclusion=single_runner(engine, "relay", database="test"),
            )
            for name, engine in zip(("a", "b"), engines, strict=True)
        ]
        for job in jobs:
            job.start()
        while len(runs) < 20:
            await asyncio.sleep(0.01)
        for job in jobs:
            await job.stop()

    asyncio.run(scenario())
    assert max(overlaps) == 1  # either may win each time; never both at once


HOLDER = """
import sys, time
from decisionflow_server.runtime.periodic import single_runner
from decisionflow_server.storage import db
held = single_runner(db.create_engine(sys.argv[1]), "relay", database="test").try_hold()
print("held" if held is not None else "refused", flush=True)
time.sleep(600)
"""


def test_the_lock_of_a_killed_holder_is_free_again(database_url: str, engines: tuple[sa.Engine, sa.Engine]) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, database_url], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        assert single_runner(engines[0], "relay", database="test").try_hold() is None
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    deadline = time.monotonic() + 30  # PostgreSQL ends the session once it sees the socket closed
    while (held := single_runner(engines[0], "relay", database="test").try_hold()) is None:
        assert time.monotonic() < deadline, "the killed holder's lock was never released"
        time.sleep(0.05)
    held.release()
