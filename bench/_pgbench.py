"""What one PostgreSQL primary sustains for the services' own statements: a pgbench script made of the
transactions one StartReview and one first Approve sent (captured by the SQL trace), run against a
database that holds both services' schemas at head.

The captured SQL has its parameters bound, so the ids that must be unique per review (operation,
case, checkpoint and receipt ids) are turned into ``:review``, a random 18-digit number set per
script run; pgbench substitutes variables into the text in its default simple query mode. Every
other value (bodies, payloads, timestamps) is replayed as captured.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench._databases import _sibling
from bench._statements import Transaction
from decisionflow_server.storage import db
from effect_receiver import store as receiver_store
from orchestrator.store import _migrations as orchestrator_migrations

PGBENCH = "/usr/bin/pgbench"
REVIEW_DIGITS = 18
REVIEW_VARIABLE = f"\\set review random({10 ** (REVIEW_DIGITS - 1)}, {10**REVIEW_DIGITS - 1})"


def find_pgbench() -> str | None:
    """The pgbench executable: /usr/bin/pgbench, else the one on PATH, else None."""
    return PGBENCH if os.access(PGBENCH, os.X_OK) else shutil.which("pgbench")


def _template(value: str) -> str:
    # Keep the head of the id (its format stays readable) and no longer than the original.
    return f"{value[: max(0, len(value) - REVIEW_DIGITS)]}:review"


def script(parts: Sequence[tuple[str, Sequence[Transaction]]], unique_values: Sequence[str]) -> str:
    """The pgbench script of the parts' transactions (each part a comment and its transactions), with
    every quoted literal equal to one of unique_values made unique per run."""
    templates = {value: _template(value) for value in unique_values}
    if len(set(templates.values())) != len(templates):
        raise ValueError("two unique values share a template; lengthen them")
    pattern = re.compile("|".join(f"'{re.escape(v)}'" for v in sorted(templates, key=len, reverse=True)))

    def unique(sql: str) -> str:
        return pattern.sub(lambda m: f"'{templates[m.group(0)[1:-1]]}'", sql)

    lines = [REVIEW_VARIABLE]
    for comment, part in parts:
        lines.append(f"-- {comment}")
        for txn in part:
            if txn.end is None:
                lines += [f"{s};" for s in txn.statements]
                continue
            lines.append("BEGIN;")
            lines += [f"{unique(s).strip()};" for s in txn.statements]
            lines.append(f"{txn.end};")
    return "\n".join(lines) + "\n"


@contextmanager
def schema_database(admin_url: str, name: str) -> Iterator[str]:
    """A fresh database next to admin_url holding both services' schemas at head; dropped on exit."""
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = _sibling(admin_url, name)
    try:
        engine = db.create_engine(url, pool_size=1)
        try:
            orchestrator_migrations.migrate(engine)
            receiver_store.migrate(engine)
        finally:
            engine.dispose()
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass(frozen=True, slots=True)
class CpuSplit:
    """Where the machine's CPU went during a pgbench run, in seconds of CPU."""

    wall_seconds: float
    cores: int
    postgres: float
    pgbench: float
    busy: float

    def share(self, seconds: float) -> float:
        """seconds as a fraction of all the cores' time over the run."""
        capacity = self.wall_seconds * self.cores
        return seconds / capacity if capacity > 0 else 0.0


@dataclass(frozen=True, slots=True)
class PgbenchRun:
    """One pgbench run: clients, transactions per second, processed and failed transactions, the CPU split."""

    clients: int
    tps: float
    processed: int
    failed: int
    exit_status: int
    cpu: CpuSplit
    output: str


_TICKS = os.sysconf("SC_CLK_TCK")


def _machine_busy() -> tuple[float, float]:
    # /proc/stat "cpu": user nice system idle iowait irq softirq steal ...
    values = [int(v) for v in Path("/proc/stat").read_text(encoding="ascii").splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / _TICKS, sum(values[:8]) / _TICKS


def _postgres_cpu() -> dict[int, float]:
    # Every process named postgres (the server's backends and helpers), user + system CPU seconds.
    seen: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name != "postgres":
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        seen[int(entry.name)] = (int(rest[11]) + int(rest[12])) / _TICKS
    return seen


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


def run(pgbench: str, url: str, script_path: Path, clients: int, seconds: int) -> PgbenchRun:
    """Run ``pgbench -n -c clients -j 2 -T seconds -f script_path`` against url, sampling the CPU of the
    server's processes while it runs (a backend's last sample stands for it once it has exited)."""
    argv = [pgbench, "-n", "-M", "simple", "-c", str(clients), "-j", "2", "-T", str(seconds), "-f", str(script_path)]
    first = _postgres_cpu()
    last = dict(first)
    busy_before, total_before = _machine_busy()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with subprocess.Popen([*argv, url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        while process.poll() is None:
            last.update(_postgres_cpu())
            time.sleep(0.2)
        output = process.stdout.read() if process.stdout is not None else ""
    wall = time.monotonic() - started
    busy_after, total_after = _machine_busy()
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    postgres = sum(seconds_used - first.get(pid, 0.0) for pid, seconds_used in last.items())
    pgbench_cpu = (children_after.ru_utime + children_after.ru_stime) - (
        children_before.ru_utime + children_before.ru_stime
    )
    cores = os.cpu_count() or 1
    # /proc/stat counts every core: its total over the run is wall time times cores.
    cpu = CpuSplit(
        wall_seconds=(total_after - total_before) / cores or wall,
        cores=cores,
        postgres=postgres,
        pgbench=pgbench_cpu,
        busy=busy_after - busy_before,
    )
    return PgbenchRun(
        clients=clients,
        tps=_number(r"tps = ([0-9.]+) \(without initial connection time\)", output),
        processed=int(_number(r"number of transactions actually processed: (\d+)", output)),
        failed=int(_number(r"number of failed transactions: (\d+)", output)),
        exit_status=process.returncode,
        cpu=cpu,
        output=output,
    )
