"""One benchmark run: start the servers, measure in interleaved rounds, settle a backlog, read memory.

Each round measures, at one concurrency, first the bare baseline chain and then the real calls, so
the baseline is taken under the same machine load as the figures it is compared with; the baseline
reported is the median of its rounds.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from bench import _calls, _identity, _inprocess, _load, _reconcile
from bench._cpu import CpuMeter
from bench._databases import Databases, fresh_databases
from bench._load import Series
from bench._processes import CHECKPOINT_KEY, ServerProcess, spawn
from bench._profile import Profiler
from decisionflow_demo.launch import UNLIMITED_AUTHORS, ProcessStack

BASELINE = "baseline_chain"
APPLY_CREATED = "receiver_apply"
APPLY_REPLAYED = "receiver_apply_replay"
START_REVIEW = "start_review"
APPROVE_FIRST = "approve_first"
APPROVE_REPLAY = "approve_replay"
REVIEW_IN_TURN = "review_in_turn"
MEASURES = (BASELINE, APPLY_CREATED, APPLY_REPLAYED, START_REVIEW, APPROVE_FIRST, APPROVE_REPLAY, REVIEW_IN_TURN)
CONCURRENCIES = (1, 16, 64)
WARMUP_CALLS = 32


@dataclass(frozen=True, slots=True)
class Plan:
    """How much to measure: rounds, calls per measurement per round at each concurrency, backlog size,
    and the worker counts to run it all at (each service and each baseline hop with that many processes)."""

    quick: bool
    rounds: int
    calls: dict[int, int]
    backlog: int
    workers: tuple[int, ...] = (1, 2)
    inprocess_jobs: int = 300


FULL = Plan(quick=False, rounds=3, calls={1: 100, 16: 480, 64: 640}, backlog=10_000)
QUICK = Plan(quick=True, rounds=2, calls={1: 12, 16: 48, 64: 64}, backlog=400, inprocess_jobs=30)
# The services whose CPU each measurement reads (/proc), as named in the report.
SERVICES = ("orchestrator", "receiver", "baseline_a", "baseline_b")


@dataclass
class Results:
    """Everything one run measured."""

    plan: Plan
    database: str
    workers: int = 1
    series: dict[tuple[str, int], Series] = field(default_factory=dict)
    # CPU seconds each service used during each measurement, summed over its rounds.
    cpu_seconds: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)
    reconcile: _reconcile.ReconcileResult | None = None
    identity_us: float = 0.0
    identities_us: float = 0.0
    inprocess: _inprocess.InProcessResult | None = None
    rss_kib: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def of(self, measure: str, in_flight: int) -> Series:
        """The series of measure at in_flight calls (created on first use)."""
        return self.series.setdefault((measure, in_flight), Series())

    def cpu_ms_per_call(self, measure: str, in_flight: int, service: str) -> float:
        """CPU milliseconds service spent per completed call of measure at in_flight (all its processes)."""
        calls = sum(s.calls for s in self.of(measure, in_flight).samples)
        used = self.cpu_seconds.get((measure, in_flight), {}).get(service, 0.0)
        return 1000 * used / calls if calls else 0.0


@dataclass
class _Servers:
    receiver: ServerProcess
    orchestrator: ServerProcess
    hop_b: ServerProcess
    hop_a: ServerProcess

    def all(self) -> dict[str, ServerProcess]:
        return {
            "receiver": self.receiver,
            "orchestrator": self.orchestrator,
            "baseline_a": self.hop_a,
            "baseline_b": self.hop_b,
        }


@contextmanager
def _servers(workdir: Path, databases: Databases, workers: int) -> Iterator[_Servers]:
    stack = ProcessStack(workdir, databases.receiver_url, databases.orchestrator_url, CHECKPOINT_KEY)
    started: list[ServerProcess] = []
    per_hop = ["--workers", str(workers)]
    try:
        receiver = stack.start_receiver(f"receiver-w{workers}", args=per_hop)
        orchestrator = stack.start_orchestrator(f"orchestrator-w{workers}", args=[*per_hop, *UNLIMITED_AUTHORS])
        hop_b = spawn("bench._baseline", ["b", *per_hop], workdir, f"baseline_b-w{workers}")
        started.append(hop_b)
        hop_a = spawn(
            "bench._baseline", ["a", "--downstream", hop_b.target, *per_hop], workdir, f"baseline_a-w{workers}"
        )
        started.append(hop_a)
        yield _Servers(receiver, orchestrator, hop_b, hop_a)
    finally:
        for process in reversed(started):
            process.stop()
        stack.close()


T = TypeVar("T")


async def _metered(
    results: Results, meter: CpuMeter | None, measure: str, in_flight: int, measuring: Awaitable[T]
) -> T:
    before = meter.snapshot() if meter is not None else {}
    outcome = await measuring
    if meter is not None:
        used = results.cpu_seconds.setdefault((measure, in_flight), {})
        for service, seconds in meter.snapshot().items():
            used[service] = used.get(service, 0.0) + seconds - before[service]
    return outcome


async def _real_round(
    clients: _calls.Clients, results: Results, in_flight: int, calls: int, tag: str, meter: CpuMeter | None = None
) -> None:
    tags = [f"{tag}-{i:05d}" for i in range(calls)]

    async def record(measure: str, measuring: Awaitable[_load.Sample]) -> None:
        results.of(measure, in_flight).add(await _metered(results, meter, measure, in_flight, measuring))

    sample, operation_ids = await _metered(
        results, meter, START_REVIEW, in_flight, _calls.start_reviews(clients, tags, in_flight)
    )
    results.of(START_REVIEW, in_flight).add(sample)
    await record(APPROVE_FIRST, _calls.approvals(clients, operation_ids, in_flight, replay=False))
    await record(APPROVE_REPLAY, _calls.approvals(clients, operation_ids, in_flight, replay=True))
    requests = _calls.apply_requests([f"{t}-apply" for t in tags])
    await record(APPLY_CREATED, _calls.applies(clients, requests, in_flight, replay=False))
    await record(APPLY_REPLAYED, _calls.applies(clients, requests, in_flight, replay=True))
    await record(REVIEW_IN_TURN, _calls.reviews_in_turn(clients, [f"{t}-turn" for t in tags], in_flight))


PROFILE_IN_FLIGHT = 16


async def _profile_round(clients: _calls.Clients, servers: _Servers, profiler: Profiler, calls: int, tag: str) -> None:
    # An extra round after the measured ones: sampling slows the servers, so nothing here is reported.
    tags = [f"{tag}-{i:05d}" for i in range(calls)]
    with profiler.record(servers.orchestrator.pid, "orchestrator-start-review"):
        _, operation_ids = await _calls.start_reviews(clients, tags, PROFILE_IN_FLIGHT)
    with (
        profiler.record(servers.orchestrator.pid, "orchestrator-approve-first"),
        profiler.record(servers.receiver.pid, "receiver-during-approve-first"),
    ):
        await _calls.approvals(clients, operation_ids, PROFILE_IN_FLIGHT, replay=False)
    with profiler.record(servers.orchestrator.pid, "orchestrator-approve-replay"):
        await _calls.approvals(clients, operation_ids, PROFILE_IN_FLIGHT, replay=True)
    requests = _calls.apply_requests([f"{t}-apply" for t in tags])
    with profiler.record(servers.receiver.pid, "receiver-apply-created"):
        await _calls.applies(clients, requests, PROFILE_IN_FLIGHT, replay=False)


async def _warm_up(clients: _calls.Clients, run_id: str) -> None:
    # Not recorded: first calls pay for connections, lazy imports and cold database pages.
    scratch = Results(QUICK, "")
    await _calls.baseline(clients, WARMUP_CALLS, 16)
    await _real_round(clients, scratch, 16, WARMUP_CALLS, f"{run_id}-warm")


async def _measure(
    servers: _Servers,
    databases: Databases,
    workdir: Path,
    results: Results,
    run_id: str,
    progress: Callable[[str], None],
    profiler: Profiler | None,
) -> None:
    plan = results.plan
    clients = _calls.Clients(servers.orchestrator.target, servers.receiver.target, servers.hop_a.target)
    meter = CpuMeter({name: process.pid for name, process in servers.all().items()})
    try:
        await _warm_up(clients, run_id)
        for round_number in range(1, plan.rounds + 1):
            for in_flight in CONCURRENCIES:
                calls = plan.calls[in_flight]
                progress(
                    f"{results.workers} worker(s), round {round_number}/{plan.rounds}: {in_flight} in flight, "
                    f"{calls} calls per measurement"
                )
                measuring = _calls.baseline(clients, calls, in_flight)
                baseline = await _metered(results, meter, BASELINE, in_flight, measuring)
                results.of(BASELINE, in_flight).add(baseline)
                await _real_round(clients, results, in_flight, calls, f"{run_id}-r{round_number}-c{in_flight}", meter)
        if profiler is not None:
            progress(f"profiling the orchestrator and receiver into {profiler.directory} (not measured)")
            await _profile_round(clients, servers, profiler, plan.calls[PROFILE_IN_FLIGHT], f"{run_id}-profile")
        progress(f"reconciler: seeding {plan.backlog} Unknowns")
        seed_seconds = await _reconcile.seed(clients, databases.orchestrator_url, plan.backlog, run_id)
    finally:
        await clients.close()
    progress("reconciler: one pass")
    results.reconcile = await asyncio.to_thread(
        _reconcile.run_pass, servers.orchestrator, servers.receiver, workdir, plan.backlog, seed_seconds
    )


def run(
    plan: Plan,
    postgres_url: str | None,
    workdir: Path | None,
    progress: Callable[[str], None],
    profiler: Profiler | None = None,
) -> list[Results]:
    """Run the whole benchmark under plan once per worker count (fresh databases each) and return the results."""
    runs: list[Results] = []
    for workers in plan.workers:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="decisionflow-bench-") as scratch:
            where = (workdir / f"workers-{workers}") if workdir else Path(scratch)
            where.mkdir(parents=True, exist_ok=True)
            with fresh_databases(where, postgres_url) as databases:
                results = Results(plan, databases.kind, workers)
                run_id = uuid.uuid4().hex[:8]
                progress(f"starting servers ({databases.kind}, {workers} worker(s) each) in {where}")
                with _servers(where, databases, workers) as servers:
                    sampled = profiler.for_workers(workers) if profiler is not None else None
                    asyncio.run(_measure(servers, databases, where, results, run_id, progress, sampled))
                    meter = CpuMeter({name: process.pid for name, process in servers.all().items()})
                    results.rss_kib = {
                        name: sum(_rss_kib(pid) for pid in pids) for name, pids in meter.processes.items()
                    }
        progress("identity: timeit")
        results.identity_us, results.identities_us = _identity.measure()
        progress(f"in process, no network: {plan.inprocess_jobs} Agent Framework jobs")
        results.inprocess = _inprocess.measure(plan.inprocess_jobs)
        results.seconds = time.perf_counter() - started
        runs.append(results)
    return runs


def _rss_kib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
