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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench import _calls, _identity, _reconcile
from bench._databases import Databases, fresh_databases
from bench._load import Series
from bench._processes import CHECKPOINT_KEY, ServerProcess, spawn
from bench._profile import Profiler
from decisionflow.stack import ProcessStack

BASELINE = "baseline_chain"
APPLY_CREATED = "receiver_apply"
APPLY_REPLAYED = "receiver_apply_replay"
START_REVIEW = "start_review"
APPROVE_FIRST = "approve_first"
APPROVE_REPLAY = "approve_replay"
MEASURES = (BASELINE, APPLY_CREATED, APPLY_REPLAYED, START_REVIEW, APPROVE_FIRST, APPROVE_REPLAY)
CONCURRENCIES = (1, 16, 64)
WARMUP_CALLS = 32


@dataclass(frozen=True, slots=True)
class Plan:
    """How much to measure: rounds, calls per measurement per round at each concurrency, backlog size."""

    quick: bool
    rounds: int
    calls: dict[int, int]
    backlog: int


FULL = Plan(quick=False, rounds=3, calls={1: 100, 16: 480, 64: 640}, backlog=10_000)
QUICK = Plan(quick=True, rounds=2, calls={1: 12, 16: 48, 64: 64}, backlog=400)


@dataclass
class Results:
    """Everything one run measured."""

    plan: Plan
    database: str
    series: dict[tuple[str, int], Series] = field(default_factory=dict)
    reconcile: _reconcile.ReconcileResult | None = None
    identity_us: float = 0.0
    identities_us: float = 0.0
    rss_kib: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def of(self, measure: str, in_flight: int) -> Series:
        """The series of measure at in_flight calls (created on first use)."""
        return self.series.setdefault((measure, in_flight), Series())


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
def _servers(workdir: Path, databases: Databases) -> Iterator[_Servers]:
    stack = ProcessStack(workdir, databases.receiver_url, databases.orchestrator_url, CHECKPOINT_KEY)
    started: list[ServerProcess] = []
    try:
        receiver = stack.start_receiver()
        orchestrator = stack.start_orchestrator()
        hop_b = spawn("bench._baseline", ["b"], workdir, "baseline_b")
        started.append(hop_b)
        hop_a = spawn("bench._baseline", ["a", "--downstream", hop_b.target], workdir, "baseline_a")
        started.append(hop_a)
        yield _Servers(receiver, orchestrator, hop_b, hop_a)
    finally:
        for process in reversed(started):
            process.stop()
        stack.close()


async def _real_round(clients: _calls.Clients, results: Results, in_flight: int, calls: int, tag: str) -> None:
    tags = [f"{tag}-{i:05d}" for i in range(calls)]
    sample, operation_ids = await _calls.start_reviews(clients, tags, in_flight)
    results.of(START_REVIEW, in_flight).add(sample)
    results.of(APPROVE_FIRST, in_flight).add(await _calls.approvals(clients, operation_ids, in_flight, replay=False))
    results.of(APPROVE_REPLAY, in_flight).add(await _calls.approvals(clients, operation_ids, in_flight, replay=True))
    requests = _calls.apply_requests([f"{t}-apply" for t in tags])
    results.of(APPLY_CREATED, in_flight).add(await _calls.applies(clients, requests, in_flight, replay=False))
    results.of(APPLY_REPLAYED, in_flight).add(await _calls.applies(clients, requests, in_flight, replay=True))


PROFILE_IN_FLIGHT = 16


async def _profile_round(clients: _calls.Clients, servers: _Servers, profiler: Profiler, calls: int, tag: str) -> None:
    # An extra round after the measured ones: sampling slows the servers, so nothing here is reported.
    tags = [f"{tag}-{i:05d}" for i in range(calls)]
    _, operation_ids = await _calls.start_reviews(clients, tags, PROFILE_IN_FLIGHT)
    with (
        profiler.record(servers.orchestrator.pid, "orchestrator-approve-first"),
        profiler.record(servers.receiver.pid, "receiver-during-approve-first"),
    ):
        await _calls.approvals(clients, operation_ids, PROFILE_IN_FLIGHT, replay=False)
    with profiler.record(servers.orchestrator.pid, "orchestrator-approve-replay"):
        await _calls.approvals(clients, operation_ids, PROFILE_IN_FLIGHT, replay=True)


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
    try:
        await _warm_up(clients, run_id)
        for round_number in range(1, plan.rounds + 1):
            for in_flight in CONCURRENCIES:
                calls = plan.calls[in_flight]
                progress(f"round {round_number}/{plan.rounds}: {in_flight} in flight, {calls} calls per measurement")
                results.of(BASELINE, in_flight).add(await _calls.baseline(clients, calls, in_flight))
                await _real_round(clients, results, in_flight, calls, f"{run_id}-r{round_number}-c{in_flight}")
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
) -> Results:
    """Run the whole benchmark under plan and return its results."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="decisionflow-bench-") as scratch:
        where = workdir or Path(scratch)
        where.mkdir(parents=True, exist_ok=True)
        with fresh_databases(where, postgres_url) as databases:
            results = Results(plan, databases.kind)
            run_id = uuid.uuid4().hex[:8]
            progress(f"starting servers ({databases.kind}) in {where}")
            with _servers(where, databases) as servers:
                asyncio.run(_measure(servers, databases, where, results, run_id, progress, profiler))
                results.rss_kib = {name: process.rss_kib() for name, process in servers.all().items()}
    progress("identity: timeit")
    results.identity_us, results.identities_us = _identity.measure()
    results.seconds = time.perf_counter() - started
    return results
