"""A closed-loop load driver: a fixed number of calls kept in flight until a list of calls is done."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

Call = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Sample:
    """One measured batch of calls: how many, how long it took, each call's latency and the failures."""

    calls: int
    seconds: float
    latencies: tuple[float, ...]
    failures: int = 0
    first_failure: str = ""

    @property
    def rps(self) -> float:
        """Completed calls per second of wall time."""
        return self.calls / self.seconds if self.seconds > 0 else 0.0


def percentile(values: Sequence[float], fraction: float) -> float:
    """Return the nearest-rank percentile of values (fraction in 0..1); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def drive(calls: Sequence[Call], in_flight: int) -> Sample:
    """Run calls with in_flight of them outstanding at any time; a failing call is counted, not retried."""
    queue = iter(calls)
    latencies: list[float] = []
    failures: list[str] = []

    async def worker() -> None:
        for call in queue:
            started = time.perf_counter()
            try:
                await call()
            except Exception as exc:  # counted and reported; the run goes on
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(in_flight, len(calls)))))
    seconds = time.perf_counter() - started
    return Sample(len(latencies), seconds, tuple(latencies), len(failures), failures[0][:300] if failures else "")


@dataclass
class Series:
    """The samples of one measurement at one concurrency, across interleaved rounds."""

    samples: list[Sample] = field(default_factory=list)

    def add(self, sample: Sample) -> None:
        """Record one round's sample."""
        self.samples.append(sample)

    @property
    def rps(self) -> float:
        """Median throughput of the rounds (calls per second)."""
        return statistics.median(s.rps for s in self.samples) if self.samples else 0.0

    def latency_ms(self, fraction: float) -> float:
        """A latency percentile over every call of every round, in milliseconds."""
        return 1000 * percentile([lat for s in self.samples for lat in s.latencies], fraction)

    @property
    def failures(self) -> int:
        """Failed calls over all rounds."""
        return sum(s.failures for s in self.samples)

    @property
    def first_failure(self) -> str:
        """The first failure seen, for the report."""
        return next((s.first_failure for s in self.samples if s.first_failure), "")
