"""What the audit log's leaves cost a StartReview and a first Approve: the orchestrator's CPU per call with
its leaves and without them, measured in alternating rounds in one run.

Two orchestrators run side by side against one receiver, each on its own fresh database: the real one, and
the same program with its leaves left out (``bench/_without_leaves.py``: no entry built, none inserted).
Both run without the sequencer in the server (``--audit-interval-seconds 0``): it works off the request path,
and is measured on its own afterwards. Each round drives StartReviews and then their first Approves at 16 in
flight through one and then the other (the order alternates between rounds, so a drift in the machine's load
falls on both), and reads each orchestrator's CPU to the nanosecond (``bench._cpu``). The report is the CPU per
call of each, summed over the rounds, the share of a call's CPU the leaves take, (with - without) / with, and
that share's median over the rounds. The servers' CPU moves with everything else on the machine; so, to see
the leaves alone, the store's two writes of a first Approve (the decision with its first attempt, the receipt)
then run in this process, with and without leaves in alternating rounds (``bench/_store_leaves.py``), and their
difference is set against the real orchestrator's CPU per first Approve. Last, the sequencer runs once over the
real orchestrator's whole backlog in this process (``orchestrator.audit.sequencer.publish``, signing one
checkpoint), and its CPU per leaf is reported.

    python -m bench.audit_cost [--quick] [--postgres-url URL] [--rounds N] [--calls N]

Prints figures and asserts nothing: ``tests/bench/test_audit_cost.py`` only checks that it runs and prints them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from bench import _calls, _store_leaves
from bench._cpu import CpuMeter
from bench._databases import fresh_databases
from bench._processes import CHECKPOINT_KEY, ServerProcess, spawn
from decisionflow.transparency import NoteSigner
from decisionflow_demo.launch import CHECKPOINT_KEYS_ENV, UNLIMITED_AUTHORS, ProcessStack, orchestrator_args
from decisionflow_server.storage import db
from orchestrator.audit.sequencer import publish
from orchestrator.audit_log.signing import CheckpointSigner
from orchestrator.schema import audit_entries
from orchestrator.store import OrchestratorStore

IN_FLIGHT = 16
WARMUP_CALLS = 32
WITH = "with leaves"
WITHOUT = "without leaves"
MEASURES = ("StartReview", "first Approve")
# No sequencer in the servers: its work is off the request path, measured on its own at the end.
SERVER_ARGS = (*UNLIMITED_AUTHORS, "--audit-interval-seconds", "0")


@dataclass
class Tally:
    """One orchestrator's CPU seconds and completed calls per measure, summed over the rounds."""

    cpu_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(MEASURES, 0.0))
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MEASURES, 0))
    failures: int = 0
    # Each round's CPU milliseconds per call, per measure, in round order.
    per_round: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MEASURES})

    def ms_per_call(self, measure: str) -> float:
        """CPU milliseconds per completed call of measure."""
        calls = self.calls[measure]
        return 1000 * self.cpu_seconds[measure] / calls if calls else 0.0


def _progress(message: str) -> None:
    sys.stderr.write(f"audit-cost: {message}\n")
    sys.stderr.flush()


async def _round(clients: _calls.Clients, meter: CpuMeter, tally: Tally, calls: int, tag: str) -> None:
    tags = [f"{tag}-{i:05d}" for i in range(calls)]
    before = meter.snapshot()["orchestrator"]
    sample, operation_ids = await _calls.start_reviews(clients, tags, IN_FLIGHT)
    middle = meter.snapshot()["orchestrator"]
    approved = await _calls.approvals(clients, operation_ids, IN_FLIGHT, replay=False)
    after = meter.snapshot()["orchestrator"]
    for measure, seconds, done in (
        ("StartReview", middle - before, sample.calls),
        ("first Approve", after - middle, approved.calls),
    ):
        tally.cpu_seconds[measure] += seconds
        tally.calls[measure] += done
        tally.per_round[measure].append(1000 * seconds / done if done else 0.0)
    tally.failures += sample.failures + approved.failures


async def _measure(
    orchestrators: dict[str, ServerProcess], receiver: ServerProcess, rounds: int, calls: int
) -> dict[str, Tally]:
    clients = {name: _calls.Clients(o.target, receiver.target, receiver.target) for name, o in orchestrators.items()}
    meters = {name: CpuMeter({"orchestrator": o.pid}) for name, o in orchestrators.items()}
    tallies = {name: Tally() for name in orchestrators}
    run_id = uuid.uuid4().hex[:8]
    try:
        for name in orchestrators:
            _progress(f"warming up the orchestrator {name} ({WARMUP_CALLS} reviews, not measured)")
            await _round(clients[name], meters[name], Tally(), WARMUP_CALLS, f"{run_id}-warm-{len(name)}")
        for number in range(1, rounds + 1):
            order = list(orchestrators) if number % 2 else list(reversed(orchestrators))
            for name in order:
                _progress(f"round {number}/{rounds}: {calls} StartReviews and first Approves {name}")
                tag = f"{run_id}-r{number}-{len(name)}"
                await _round(clients[name], meters[name], tallies[name], calls, tag)
    finally:
        for client in clients.values():
            await client.close()
    return tallies


def _entries(url: str) -> int:
    engine = db.create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(audit_entries)).scalar_one())
    finally:
        engine.dispose()


def _shares(tallies: dict[str, Tally], measure: str) -> list[float]:
    # Each round's share, from the two orchestrators' runs back to back in that round.
    pairs = zip(tallies[WITH].per_round[measure], tallies[WITHOUT].per_round[measure], strict=True)
    return [(with_ - without) / with_ for with_, without in pairs if with_]


def _spread(shares: list[float]) -> str:
    # CPU is read to the nanosecond (bench._cpu); only where the process's CPU clock cannot be read does it
    # come in clock ticks (10 ms), and then a round of a few calls can read as no CPU, with no share to give.
    if not shares:
        return "none: no round measured the orchestrator's CPU (read in clock ticks here)"
    quartiles = statistics.quantiles(shares, n=4) if len(shares) > 1 else shares * 3
    return f"{100 * statistics.median(shares):.1f}% [{100 * quartiles[0]:.1f}%, {100 * quartiles[2]:.1f}%]"


def _sequencing(url: str, tally: Tally) -> str:
    engine = db.create_engine(url)
    try:
        signer = CheckpointSigner("bench.local/audit", NoteSigner.from_seed("bench.local/audit", bytes(32)))
        started = time.process_time()
        done = publish(OrchestratorStore(engine), signer, lambda: datetime.now(UTC))
        cpu = time.process_time() - started
    finally:
        engine.dispose()
    per_leaf = 1e6 * cpu / done.sequenced if done.sequenced else 0.0
    reviews = tally.calls["first Approve"]
    # A review writes three leaves: its proposal, its decision and its effect.
    per_review = 3 * per_leaf
    first = tally.ms_per_call("StartReview") + tally.ms_per_call("first Approve")
    share = per_review / (1000 * first) if first else 0.0
    return (
        f"  sequencing off the request path: {done.sequenced} entries in {1000 * cpu:.0f} ms of CPU, "
        f"{per_leaf:.0f} µs per leaf, {per_review:.0f} µs per review of 3 leaves "
        f"({100 * share:.1f}% of a StartReview and first Approve's CPU; {reviews} reviews measured)"
    )


def render_store(store: _store_leaves.StoreCost, tally: Tally) -> str:
    """The store's writes of a first Approve with and without leaves, and the leaves' share of the server's
    CPU per first Approve (with leaves)."""
    without = statistics.median(store.without_leaves)
    with_ = statistics.median(store.with_leaves)
    pairs = [w - wo for w, wo in zip(store.with_leaves, store.without_leaves, strict=True)]
    leaves = statistics.median(pairs)
    server = 1000 * tally.ms_per_call("first Approve")
    share = leaves / server if server else 0.0
    return (
        f"  a first Approve's store writes in process (median of {len(pairs)} rounds): {without:.0f} µs without "
        f"leaves, {with_:.0f} µs with; the two leaves {leaves:.0f} µs (rounds {min(pairs):.0f} to "
        f"{max(pairs):.0f}) = {100 * share:.1f}% of the orchestrator's {server / 1000:.3f} ms per first Approve"
    )


def render(tallies: dict[str, Tally], database: str, rounds: int, calls: int) -> str:
    """The table of CPU per call with and without leaves, the leaves' share of the total, and the median and
    quartiles of each round's share (a load burst moves one round, not the median)."""
    lines = [
        f"audit leaves' cost ({database}, {rounds} alternating rounds of {calls} calls each at {IN_FLIGHT} in flight;"
        " orchestrator CPU per call)",
        f"  {'':<14}{WITHOUT:>15}{WITH:>15}{'leaves':>10}{'share':>8}   per-round share: median [quartiles]",
    ]
    for measure in MEASURES:
        without = tallies[WITHOUT].ms_per_call(measure)
        with_ = tallies[WITH].ms_per_call(measure)
        share = (with_ - without) / with_ if with_ else 0.0
        lines.append(
            f"  {measure:<14}{without:>12.3f} ms{with_:>12.3f} ms{1000 * (with_ - without):>7.0f} µs"
            f"{100 * share:>7.1f}%   {_spread(_shares(tallies, measure))}"
        )
    failed = sum(t.failures for t in tallies.values())
    lines.append(f"  failed calls: {failed}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the measurement once and print its table."""
    cli = argparse.ArgumentParser(prog="python -m bench.audit_cost", description=__doc__.split("\n\n")[0])
    cli.add_argument("--quick", action="store_true", help="2 rounds of 48 calls (default: 16 rounds of 200)")
    cli.add_argument("--postgres-url", help="run on fresh PostgreSQL databases made next to this one")
    cli.add_argument("--rounds", type=int, help="alternating rounds")
    cli.add_argument("--calls", type=int, help="StartReviews (and as many first Approves) per round per orchestrator")
    ns = cli.parse_args(argv)
    rounds = max(1, ns.rounds if ns.rounds is not None else (2 if ns.quick else 16))
    calls = max(1, ns.calls if ns.calls is not None else (48 if ns.quick else 200))
    with tempfile.TemporaryDirectory(prefix="decisionflow-audit-cost-") as scratch, ExitStack() as stack:
        work = Path(scratch)
        databases = {}
        for name in (WITH, WITHOUT):
            where = work / ("with" if name == WITH else "without")
            where.mkdir()
            databases[name] = stack.enter_context(fresh_databases(where, ns.postgres_url))
        processes = ProcessStack(work, databases[WITH].receiver_url, databases[WITH].orchestrator_url, CHECKPOINT_KEY)
        stack.callback(processes.close)
        _progress(f"starting a receiver and two orchestrators ({databases[WITH].kind}) in {work}")
        receiver = processes.start_receiver("receiver")
        orchestrators = {WITH: processes.start_orchestrator("orchestrator-with-leaves", args=SERVER_ARGS)}
        baseline = spawn(
            "bench._without_leaves",
            orchestrator_args(databases[WITHOUT].orchestrator_url, receiver.target, extra=SERVER_ARGS),
            work,
            "orchestrator-without-leaves",
            env={CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY},
        )
        stack.callback(baseline.stop)
        orchestrators[WITHOUT] = baseline
        tallies = asyncio.run(_measure(orchestrators, receiver, rounds, calls))
        entries = {name: _entries(databases[name].orchestrator_url) for name in (WITH, WITHOUT)}
        print(render(tallies, databases[WITH].kind, rounds, calls))
        print(f"  audit entries written: {entries[WITH]} {WITH}, {entries[WITHOUT]} {WITHOUT}")
        store = _store_leaves.measure(databases[WITH].orchestrator_url, rounds, calls, _progress)
        print(render_store(store, tallies[WITH]))
        _progress("sequencing and signing the log's backlog once")
        print(_sequencing(databases[WITH].orchestrator_url, tallies[WITH]))
    return 1 if any(t.failures for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
