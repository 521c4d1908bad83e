"""A measured scale plan for one PostgreSQL primary: ``python -m bench.scale_plan`` (``make scale-plan``).

1. Statements and commits per StartReview and per first Approve, in the orchestrator's database and
   in the receiver's, counted at both ends: the services' own SQL (run under ``bench._sql_trace``)
   and ``pg_stat_database`` of each service's fresh database, one call in flight.
2. What the primary sustains for that mix: a pgbench script of the transactions one StartReview and
   one first Approve sent, run for a few client counts against a database migrated to head.
3. One orchestrator worker's StartReviews/s and first Approves/s at 16 in flight (both services with
   ``--workers 1``, untraced), measured in the same run, so the ratio below holds on any machine:
   orchestrator replicas one primary serves = the primary's reviews/s ÷ one worker's first Approves/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg

from bench import _calls, _pgbench, _report
from bench._databases import Databases, fresh_databases
from bench._load import Series
from bench._processes import CHECKPOINT_KEY, ServerProcess
from bench._sql_trace import TRACE_ENV
from bench._statements import (
    ClientTally,
    ServerTally,
    Trace,
    Transaction,
    as_json,
    difference,
    server_counters,
    tally,
    transactions,
)
from bench._workload import case_id
from decisionflow_demo.launch import (
    CHECKPOINT_KEYS_ENV,
    ORCHESTRATOR_MODULE,
    RECEIVER_MODULE,
    UNLIMITED_AUTHORS,
    ProcessStack,
    orchestrator_args,
    receiver_args,
)
from decisionflow_server.foundation.processes import spawn

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
SERVICES = ("orchestrator", "receiver")
CALLS = ("start_review", "approve_first")
IN_FLIGHT = 16


@dataclass(frozen=True, slots=True)
class Plan:
    """How much to measure."""

    reviews: int  # counted one at a time for the statements and commits per call
    clients: tuple[int, ...]  # pgbench client counts
    seconds: int  # per pgbench run
    calls: int  # per throughput round, at 16 in flight
    rounds: int


FULL = Plan(reviews=100, clients=(2, 4, 8, 16), seconds=20, calls=480, rounds=3)
QUICK = Plan(reviews=10, clients=(2, 4), seconds=3, calls=48, rounds=1)


@dataclass
class Counts:
    """Per call and service: what the service sent and what its database counted, over `calls` calls."""

    calls: int = 0
    client: dict[tuple[str, str], ClientTally] = field(default_factory=dict)
    server: dict[tuple[str, str], ServerTally] = field(default_factory=dict)


def _database_name(url: str) -> str:
    return url.partition("?")[0].rpartition("/")[2]


def _progress(message: str) -> None:
    sys.stderr.write(f"scale-plan: {message}\n")
    sys.stderr.flush()


def _traced_stack(workdir: Path, databases: Databases) -> tuple[ServerProcess, ServerProcess]:
    receiver = spawn(
        "bench._sql_trace",
        [RECEIVER_MODULE, *receiver_args(databases.receiver_url, extra=["--workers", "1"])],
        workdir,
        "receiver-traced",
        env={TRACE_ENV: str(workdir / "receiver.sql.jsonl")},
    )
    orchestrator = spawn(
        "bench._sql_trace",
        [
            ORCHESTRATOR_MODULE,
            *orchestrator_args(
                databases.orchestrator_url,
                receiver.target,
                # The audit log's sequencer and the review timer run off the request path, each with its own
                # transactions per interval: left out here, so the counts are each call's own statements.
                extra=[
                    "--workers",
                    "1",
                    "--audit-interval-seconds",
                    "0",
                    "--review-timer-interval-seconds",
                    "0",
                    *UNLIMITED_AUTHORS,
                ],
            ),
        ],
        workdir,
        "orchestrator-traced",
        env={TRACE_ENV: str(workdir / "orchestrator.sql.jsonl"), CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY},
    )
    return receiver, orchestrator


async def _one_approve(clients: _calls.Clients, operation_id: str) -> str:
    """Approve once; return the receipt id."""
    from decisionflow.v1 import common_pb2, review_pb2

    answer = await clients.review.Approve(
        review_pb2.ApproveRequest(operation_id=operation_id, decision=common_pb2.DECISION_APPROVE),
        timeout=_calls.CALL_TIMEOUT_SECONDS,
    )
    if answer.outcome != common_pb2.OUTCOME_COMMITTED:
        raise _calls.UnexpectedAnswer(f"Approve {operation_id}: outcome {answer.outcome}")
    return str(answer.operation.receipt.receipt_id)


async def _count(
    admin_url: str, databases: Databases, traces: dict[str, Trace], clients: _calls.Clients, plan: Plan, run: str
) -> tuple[Counts, list[tuple[str, list[Transaction]]], list[str]]:
    names = {
        "orchestrator": _database_name(databases.orchestrator_url),
        "receiver": _database_name(databases.receiver_url),
    }
    counts = Counts(calls=plan.reviews)
    # Each read waits seconds for the counters to settle: a window's end is the next one's start,
    # since nothing runs between two windows.
    settled: dict[str, ServerTally] | None = None

    async def window(call: str, measuring: Any) -> Any:
        nonlocal settled
        marks = {s: traces[s].mark() for s in SERVICES}
        before = (
            settled
            if settled is not None
            else await asyncio.to_thread(server_counters, admin_url, list(names.values()))
        )
        outcome = await measuring
        after = await asyncio.to_thread(server_counters, admin_url, list(names.values()))
        settled = after
        for service in SERVICES:
            counts.client[(call, service)] = tally(traces[service].events(marks[service]))
            counts.server[(call, service)] = difference(after[names[service]], before[names[service]])
        return outcome

    # Not counted: the first calls load the workflow and open the pools.
    _, warm = await _calls.start_reviews(clients, [f"{run}-warm-{i}" for i in range(2)], 1)
    await _calls.approvals(clients, warm, 1, replay=False)

    tags = [f"{run}-count-{i:05d}" for i in range(plan.reviews)]
    sample, operation_ids = await window("start_review", _calls.start_reviews(clients, tags, 1))
    approved = await window("approve_first", _calls.approvals(clients, operation_ids, 1, replay=False))
    if sample.failures or approved.failures:
        raise RuntimeError(f"counting calls failed: {sample.failures} StartReview, {approved.failures} Approve")

    # One more review, its transactions kept for the pgbench script.
    tag = f"{run}-script"
    marks = [{s: traces[s].mark() for s in SERVICES}]
    _, (operation_id,) = await _calls.start_reviews(clients, [tag], 1)
    marks.append({s: traces[s].mark() for s in SERVICES})
    receipt_id = await _one_approve(clients, operation_id)
    marks.append({s: traces[s].mark() for s in SERVICES})
    parts: list[tuple[str, list[Transaction]]] = []
    for index, call in enumerate(("StartReview", "first Approve")):
        merged = []
        for service in SERVICES:
            merged += [
                (t, service)
                for t in transactions(traces[service].events(marks[index][service], marks[index + 1][service]))
            ]
        merged.sort(key=lambda pair: pair[0].at)
        for txn, service in merged:  # in the order they ended; a run of one service's under one comment
            comment = f"{call}: {service}"
            if parts and parts[-1][0] == comment:
                parts[-1][1].append(txn)
            else:
                parts.append((comment, [txn]))
    with psycopg.connect(databases.orchestrator_url, autocommit=True) as conn:
        checkpoints = [
            row[0]
            for row in conn.execute(
                "SELECT checkpoint_id FROM checkpoints WHERE operation_id = %s "
                "UNION SELECT checkpoint_id FROM pending_reviews WHERE operation_id = %s",
                (operation_id, operation_id),
            )
        ]
    unique_values = [operation_id, case_id(tag), receipt_id, *checkpoints]
    return counts, parts, unique_values


async def _throughput(orchestrator: ServerProcess, receiver: ServerProcess, plan: Plan, run: str) -> dict[str, Series]:
    clients = _calls.Clients(orchestrator.target, receiver.target, receiver.target)
    series = {call: Series() for call in CALLS}
    try:
        _, warm = await _calls.start_reviews(clients, [f"{run}-warm-{i}" for i in range(32)], IN_FLIGHT)
        await _calls.approvals(clients, warm, IN_FLIGHT, replay=False)
        for number in range(plan.rounds):
            tags = [f"{run}-r{number}-{i:05d}" for i in range(plan.calls)]
            started, operation_ids = await _calls.start_reviews(clients, tags, IN_FLIGHT)
            series["start_review"].add(started)
            series["approve_first"].add(await _calls.approvals(clients, operation_ids, IN_FLIGHT, replay=False))
    finally:
        await clients.close()
    return series


@dataclass
class ScalePlan:
    """Everything one run measured."""

    plan: Plan
    server: dict[str, str]
    counts: Counts
    script_path: Path
    script_transactions: int
    script_statements: int
    pgbench: list[_pgbench.PgbenchRun]
    throughput: dict[str, Series]

    @property
    def primary_reviews_per_second(self) -> float:
        """The most reviews/s (pgbench transactions/s) of any client count."""
        return max((r.tps for r in self.pgbench), default=0.0)

    @property
    def worker_approves_per_second(self) -> float:
        """One orchestrator worker's first Approves/s at 16 in flight."""
        return self.throughput["approve_first"].rps

    @property
    def worker_reviews_per_second(self) -> float:
        """One orchestrator worker's whole reviews/s (StartReview then first Approve, one after the other)."""
        start, approve = self.throughput["start_review"].rps, self.worker_approves_per_second
        return 1 / (1 / start + 1 / approve) if start > 0 and approve > 0 else 0.0

    @property
    def replicas(self) -> float:
        """Orchestrator replicas one primary serves: its reviews/s ÷ one worker's first Approves/s."""
        worker = self.worker_approves_per_second
        return self.primary_reviews_per_second / worker if worker > 0 else 0.0

    @property
    def replicas_whole_reviews(self) -> float:
        """The same, against one worker's whole reviews/s."""
        worker = self.worker_reviews_per_second
        return self.primary_reviews_per_second / worker if worker > 0 else 0.0


def _server_settings(admin_url: str) -> dict[str, str]:
    settings = {}
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        for name in ("server_version", "synchronous_commit", "fsync", "autovacuum", "max_connections"):
            row = conn.execute(f"SHOW {name}").fetchone()
            settings[name] = "" if row is None else str(row[0])
    return settings


def measure(plan: Plan, admin_url: str, workdir: Path, pgbench: str) -> ScalePlan:
    """Run the three measurements (services stopped between them) and return what they found."""
    run = uuid.uuid4().hex[:8]
    settings = _server_settings(admin_url)
    traces = {s: Trace(workdir / f"{s}.sql.jsonl") for s in SERVICES}
    _progress(f"counting statements and commits over {plan.reviews} StartReviews and first Approves, 1 in flight")
    with fresh_databases(workdir, admin_url) as databases:
        receiver, orchestrator = _traced_stack(workdir, databases)
        try:
            counts, parts, unique_values = asyncio.run(
                _count_and_close(admin_url, databases, traces, (orchestrator, receiver), plan, run)
            )
        finally:
            orchestrator.stop()
            receiver.stop()

    _progress(
        f"one orchestrator worker: {plan.rounds} round(s) of {plan.calls} StartReviews and first Approves "
        f"at {IN_FLIGHT} in flight"
    )
    with fresh_databases(workdir, admin_url) as databases:
        stack = ProcessStack(workdir, databases.receiver_url, databases.orchestrator_url, CHECKPOINT_KEY)
        try:
            receiver = stack.start_receiver("receiver", args=["--workers", "1"])
            orchestrator = stack.start_orchestrator("orchestrator", args=["--workers", "1", *UNLIMITED_AUTHORS])
            throughput = asyncio.run(_throughput(orchestrator, receiver, plan, run))
        finally:
            stack.close()

    script_text = _pgbench.script(parts, unique_values)
    script_path = workdir / "review.pgbench"
    script_path.write_text(script_text, encoding="utf-8")
    script_transactions = sum(len(txns) for _, txns in parts)
    script_statements = sum(len(t.statements) for _, txns in parts for t in txns)
    runs = []
    with _pgbench.schema_database(admin_url, f"scale_plan_{run}") as url:
        for clients_count in plan.clients:
            _progress(f"pgbench: {clients_count} clients for {plan.seconds} s")
            runs.append(_pgbench.run(pgbench, url, script_path, clients_count, plan.seconds))
    return ScalePlan(plan, settings, counts, script_path, script_transactions, script_statements, runs, throughput)


async def _count_and_close(
    admin_url: str,
    databases: Databases,
    traces: dict[str, Trace],
    servers: tuple[ServerProcess, ServerProcess],
    plan: Plan,
    run: str,
) -> tuple[Counts, list[tuple[str, list[Transaction]]], list[str]]:
    orchestrator, receiver = servers
    clients = _calls.Clients(orchestrator.target, receiver.target, receiver.target)
    try:
        return await _count(admin_url, databases, traces, clients, plan, run)
    finally:
        await clients.close()


_TITLES = {"start_review": "StartReview", "approve_first": "first Approve"}


def render(result: ScalePlan, machine: dict[str, Any]) -> str:
    """The printed report: every figure the deployment guide quotes."""
    counts, n = result.counts, result.counts.calls
    server = result.server
    lines = [
        f"decisionflow scale plan — one PostgreSQL {server['server_version']} primary"
        + (" — QUICK (short runs; not comparable)" if result.plan.reviews < FULL.reviews else ""),
        f"machine: {machine['cpu']}, {machine['cores']} cores (the database, pgbench and the services share them); "
        f"load average before {machine['load_average_before']}, after {machine['load_average_after']}",
        f"server: synchronous_commit={server['synchronous_commit']} (the services do not change it), "
        f"fsync={server['fsync']}, autovacuum={server['autovacuum']}",
        "",
        f"per call, mean of {n} calls one at a time; sent = the service's own SQL (trace), "
        "counted = pg_stat_database of its database",
        f"{'call':<15}{'database':<14}{'statements':>11}{'commits':>9}{'rollbacks':>10}{'pings':>10}"
        f"{'  |':<4}{'xact_commit':>12}{'xact_rollback':>14}{'inserted':>9}{'updated':>8}{'deleted':>8}{'fetched':>8}",
    ]
    for call in CALLS:
        for service in SERVICES:
            sent, counted = counts.client[(call, service)], counts.server[(call, service)]
            lines.append(
                f"{_TITLES[call]:<15}{service:<14}{sent.statements / n:>11.2f}{sent.commits / n:>9.2f}"
                f"{sent.rollbacks / n:>10.2f}{sent.pings / n:>10.2f}{'  |':<4}{counted.xact_commit / n:>12.2f}"
                f"{counted.xact_rollback / n:>14.2f}{counted.tup_inserted / n:>9.2f}{counted.tup_updated / n:>8.2f}"
                f"{counted.tup_deleted / n:>8.2f}{counted.tup_fetched / n:>8.2f}"
            )
    lines += [
        "  sent commits + pings = counted xact_commit (a ping, sent for a pooled connection idle 1 s or more, is "
        "one autocommit statement); sent rollbacks = counted xact_rollback (reads end in a rollback)",
        "",
        f"pgbench script of one StartReview + first Approve ({result.script_transactions} transactions, "
        f"{result.script_statements} statements; {result.script_path}):",
    ]
    for run in result.pgbench:
        cpu = run.cpu
        other = max(0.0, cpu.busy - cpu.postgres - cpu.pgbench)
        lines.append(
            f"  pgbench -n -M simple -c {run.clients:<2} -j 2 -T {result.plan.seconds}: {run.tps:8,.1f} reviews/s "
            f"({run.processed:,} processed, {run.failed} failed, exit {run.exit_status}); CPU of {cpu.cores} cores: "
            f"postgres {cpu.share(cpu.postgres):.0%}, pgbench {cpu.share(cpu.pgbench):.0%}, "
            f"other {cpu.share(other):.0%}, idle {cpu.share(max(0.0, cpu.wall_seconds * cpu.cores - cpu.busy)):.0%}"
        )
    start, approve = result.throughput["start_review"], result.throughput["approve_first"]
    lines += [
        "",
        f"one orchestrator worker (--workers 1, receiver --workers 1), {IN_FLIGHT} in flight, median of "
        f"{result.plan.rounds} round(s) of {result.plan.calls}: StartReview {start.rps:,.1f}/s, "
        f"first Approve {approve.rps:,.1f}/s ({start.failures + approve.failures} failed); "
        f"both one after the other {result.worker_reviews_per_second:,.1f} reviews/s",
        f"primary reviews/s (best of the pgbench runs): {result.primary_reviews_per_second:,.1f}",
        f"orchestrator replicas one primary serves = {result.primary_reviews_per_second:,.1f} / "
        f"{result.worker_approves_per_second:,.1f} = {result.replicas:,.1f} "
        f"(against whole reviews: {result.primary_reviews_per_second:,.1f} / "
        f"{result.worker_reviews_per_second:,.1f} = {result.replicas_whole_reviews:,.1f})",
    ]
    return "\n".join(lines)


def document(result: ScalePlan, machine: dict[str, Any]) -> dict[str, Any]:
    """The JSON form of the run."""
    return {
        "machine": machine,
        "server": result.server,
        "calls_counted": result.counts.calls,
        "per_call": {
            call: {
                service: {
                    "sent": as_json(result.counts.client[(call, service)]),
                    "counted": as_json(result.counts.server[(call, service)]),
                }
                for service in SERVICES
            }
            for call in CALLS
        },
        "script": {
            "path": str(result.script_path),
            "transactions": result.script_transactions,
            "statements": result.script_statements,
        },
        "pgbench": [
            {
                "clients": r.clients,
                "seconds": result.plan.seconds,
                "tps": r.tps,
                "processed": r.processed,
                "failed": r.failed,
                "exit_status": r.exit_status,
                "cpu": {
                    "postgres_s": r.cpu.postgres,
                    "pgbench_s": r.cpu.pgbench,
                    "busy_s": r.cpu.busy,
                    "wall_s": r.cpu.wall_seconds,
                    "cores": r.cpu.cores,
                },
            }
            for r in result.pgbench
        ],
        "worker": {
            "start_review_rps": result.throughput["start_review"].rps,
            "approve_first_rps": result.worker_approves_per_second,
            "reviews_rps": result.worker_reviews_per_second,
            "failed": sum(s.failures for s in result.throughput.values()),
        },
        "primary_reviews_rps": result.primary_reviews_per_second,
        "replicas": result.replicas,
        "replicas_whole_reviews": result.replicas_whole_reviews,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print the scale plan; exit 2 without pgbench or PostgreSQL."""
    cli = argparse.ArgumentParser(prog="python -m bench.scale_plan", description=__doc__.splitlines()[0])
    cli.add_argument(
        "--postgres-url",
        default=os.environ.get("DECISIONFLOW_TEST_POSTGRES_URL") or DEFAULT_URL,
        help=f"a superuser's URL; scratch databases are made next to it and dropped (default: {DEFAULT_URL})",
    )
    cli.add_argument(
        "--quick",
        action="store_true",
        help="10 reviews counted, pgbench at 2 and 4 clients for 3 s each, one round of 48 calls",
    )
    cli.add_argument("--clients", help="comma-separated pgbench client counts (default: 2,4,8,16; quick: 2,4)")
    cli.add_argument("--seconds", type=int, help="seconds per pgbench run (default: 20; quick: 3)")
    cli.add_argument("--workdir", type=Path, help="keep the traces, the pgbench script and the logs here")
    cli.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    ns = cli.parse_args(argv)
    pgbench = _pgbench.find_pgbench()
    if pgbench is None:
        cli.error("pgbench not found (/usr/bin/pgbench or on PATH): apt-get install postgresql-client")
    plan = QUICK if ns.quick else FULL
    if ns.clients:
        try:
            plan = replace(plan, clients=tuple(int(c) for c in ns.clients.split(",") if c.strip()))
        except ValueError:
            cli.error(f"--clients: expected comma-separated whole numbers, not {ns.clients!r}")
    if ns.seconds is not None:
        plan = replace(plan, seconds=max(1, ns.seconds))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="scale-plan-") as scratch:
        workdir = ns.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        result = measure(plan, ns.postgres_url, workdir, pgbench)
        machine = _report.machine(load_before, os.getloadavg())
        print(render(result, machine))
        if ns.json is not None:
            ns.json.write_text(json.dumps(document(result, machine), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
