"""A soak: steady mixed traffic for ``--soak-seconds`` with periodic kills and checkpoint prunes.

Reviewers start, edit, approve, decline, replay and contradict on fresh cases without pause,
while a chaos thread SIGKILLs the orchestrator or the receiver (in turn, every
``KILL_EVERY_SECONDS``), restarts it on its port and runs one reconciler pass, and every
``PRUNE_EVERY_SECONDS`` runs ``decisionflow-orchestrator prune-checkpoints --older-than-days 0``.
The receiver loses one reply in twenty after its commit (``DECISIONFLOW_RECEIVER_FAULTS``), so
Apply is repeated under the same key all along, by the orchestrator's retries and by replays.
A sampler reads each service process's RSS (``/proc/PID/status`` VmRSS) and open descriptors
(``/proc/PID/fd``), the SQLite files' sizes and the checkpoint rows. At the end the faults stop,
one pass runs and the history must hold. Only safety is asserted; the resource series is printed
for the reader (a threshold on it would be a timed assertion).
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from decisionflow.client import Decision
from tests.campaigns.cluster import Cluster
from tests.campaigns.history import History
from tests.campaigns.report import publish
from tests.campaigns.workload import Reviewer, settle_and_check

KILL_EVERY_SECONDS = 15.0
PRUNE_EVERY_SECONDS = 20.0
SAMPLE_EVERY_SECONDS = 5.0
WARM_UP_SECONDS = 30.0
REVIEWERS = 3
SEED = 20261201
FAULTS_ENV = "DECISIONFLOW_RECEIVER_FAULTS"
LOSE_REPLY = 0.05
EDIT_SHARE, DECLINE_SHARE, REPLAY_SHARE, CONTRADICT_SHARE, RESTART_SHARE = 0.2, 0.15, 0.3, 0.05, 0.1


@dataclass(frozen=True)
class ProcessSample:
    """One service process at one moment."""

    pid: int
    rss_kb: int
    fds: int


@dataclass(frozen=True)
class Sample:
    """Everything read at one moment: per service process, database files and checkpoint rows."""

    at: float
    processes: dict[str, ProcessSample]
    database_bytes: dict[str, int]
    checkpoint_rows: int
    unsettled_checkpoint_rows: int  # of operations still pending review: prune-checkpoints keeps them

    def line(self) -> str:
        """One compact line of the time series."""
        procs = " ".join(
            f"{name}={p.pid}/{p.rss_kb / 1024:.0f}MB/{p.fds}fd" for name, p in sorted(self.processes.items())
        )
        sizes = " ".join(f"{name}={size // 1024}KiB" for name, size in sorted(self.database_bytes.items()))
        return f"t={self.at:6.0f}s {procs} {sizes} checkpoints={self.checkpoint_rows}/{self.unsettled_checkpoint_rows}"


def _process_sample(pid: int) -> ProcessSample | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None  # killed between the liveness check and the read
    rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return ProcessSample(pid, rss, fds)


def _database_bytes(workdir: Path, name: str) -> int:
    # SQLite in WAL mode keeps recent commits in -wal until a checkpoint: count every file.
    return sum(p.stat().st_size for p in workdir.glob(f"{name}.db*") if p.exists())


def _checkpoint_rows(database: Path) -> tuple[int, int]:
    """All checkpoint rows, and those of operations still pending review (superseded ones included)."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10) as conn:
        total = int(conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0])
        unsettled = conn.execute(
            "SELECT count(*) FROM checkpoints JOIN operations o USING (operation_id) WHERE o.state = 'pending_review'"
        ).fetchone()[0]
        return total, int(unsettled)


def sample(cluster: Cluster, workdir: Path, at: float) -> Sample:
    """Read RSS and descriptors of each running service, the database sizes and the checkpoint rows."""
    processes = {}
    for server in cluster.servers():
        child = server.child
        if child is not None and child.alive:
            found = _process_sample(child.pid)
            if found is not None:
                processes[server.name] = found
    sizes = {name: _database_bytes(workdir, name) for name in ("orchestrator", "receiver")}
    return Sample(round(at, 1), processes, sizes, *_checkpoint_rows(workdir / "orchestrator.db"))


def _traffic(reviewer: Reviewer, worker: int, seed: int, stop: threading.Event) -> int:
    rng = random.Random(f"{seed}:{worker}")
    cases = 0
    while not stop.is_set():
        case = f"K{worker}-{cases}"
        cases += 1
        op = reviewer.start(case)
        if op is None:
            continue
        if rng.random() < RESTART_SHARE:
            reviewer.start(case)  # the same content again: the existing proposal
        if rng.random() < EDIT_SHARE:
            op = reviewer.edit(case, op, 1) or op
        decision = Decision.DECLINE if rng.random() < DECLINE_SHARE else Decision.APPROVE
        reviewer.decide(case, op, decision)
        if rng.random() < REPLAY_SHARE:
            reviewer.decide(case, op, decision)
        if rng.random() < CONTRADICT_SHARE:
            other = Decision.APPROVE if decision is Decision.DECLINE else Decision.DECLINE
            reviewer.decide(case, op, other)
    return cases


@dataclass
class Chaos:
    """Kills, prunes and reconciler passes on a schedule until stopped; counts what it did."""

    cluster: Cluster
    orchestrator_url: str
    kills: int = 0
    prunes: int = 0
    pruned: int = 0
    passes: int = 0

    def prune(self) -> None:
        """Run ``prune-checkpoints --older-than-days 0`` as its own process; add what it deleted."""
        self.prunes += 1
        child = self.cluster.launcher.start(
            f"prune-{self.prunes}",
            "orchestrator.main",
            ["prune-checkpoints", "--older-than-days", "0", "--database-url", self.orchestrator_url],
        )
        if child.wait(60) == 0:
            self.pruned += int(json.loads(child.stdout().strip().splitlines()[-1])["checkpoints"])
        else:
            child.kill()

    def run(self, stop: threading.Event) -> None:
        """Alternate kills of the orchestrator and the receiver, a pass after each; prune in between."""
        next_kill, next_prune = time.monotonic() + KILL_EVERY_SECONDS, time.monotonic() + PRUNE_EVERY_SECONDS
        targets = [self.cluster.orchestrators[0], self.cluster.receiver]
        while not stop.wait(0.2):
            now = time.monotonic()
            if now >= next_kill:
                server = targets[self.kills % len(targets)]
                server.kill()
                self.kills += 1
                server.start()
                self.cluster.reconcile_once()  # settles what it can; its exit status is not asserted mid-load
                self.passes += 1
                next_kill = time.monotonic() + KILL_EVERY_SECONDS
            if now >= next_prune:
                self.prune()
                next_prune = time.monotonic() + PRUNE_EVERY_SECONDS


def _growth(samples: list[Sample], name: str) -> str:
    """RSS after warm-up against the end: medians of the first and the last minute past warm-up, in percent.

    Every incarnation of a killed service starts afresh, so this says whether the memory a
    service reaches under the load creeps up over the run, not whether one process leaks.
    """
    seen = [(s.at, s.processes[name].rss_kb) for s in samples if s.at >= WARM_UP_SECONDS and name in s.processes]
    if len(seen) < 2:
        return "n/a"
    start, end = seen[0][0], seen[-1][0]
    first = statistics.median(kb for at, kb in seen if at <= start + 60)
    last = statistics.median(kb for at, kb in seen if at >= end - 60)
    return f"{100 * (last - first) / first:+.1f}%"


@pytest.mark.campaign
@pytest.mark.slow
def test_soak_mixed_traffic_with_kills_and_prunes(
    request: pytest.FixtureRequest, make_cluster: Callable[..., Cluster], history: History
) -> None:
    """--soak-seconds of mixed traffic, kills and prunes: the history holds and one pass settles everything."""
    seconds = float(request.config.getoption("--soak-seconds"))
    if seconds <= 0:
        raise pytest.UsageError("--soak-seconds must be positive")
    cluster = make_cluster()
    cluster.receiver.env[FAULTS_ENV] = f"lose_reply={LOSE_REPLY},seed={SEED}"
    workdir = cluster.launcher.workdir
    orchestrator_url = f"sqlite:///{workdir / 'orchestrator.db'}"
    cluster.start()
    stop = threading.Event()
    chaos = Chaos(cluster, orchestrator_url)
    samples: list[Sample] = []
    connected = [Reviewer.connect(f"soak{i}", cluster.orchestrators[0].target, history) for i in range(REVIEWERS)]
    cases: list[int] = []
    workers = [
        threading.Thread(target=lambda r=r, i=i: cases.append(_traffic(r, i, SEED, stop)), name=f"soak{i}")
        for i, (r, _) in enumerate(connected)
    ]
    chaos_thread = threading.Thread(target=chaos.run, args=(stop,), name="chaos")
    began = time.monotonic()
    for thread in [*workers, chaos_thread]:
        thread.start()
    try:
        while (elapsed := time.monotonic() - began) < seconds:
            samples.append(sample(cluster, workdir, elapsed))
            time.sleep(min(SAMPLE_EVERY_SECONDS, max(0.0, seconds - elapsed)))
    finally:
        stop.set()
        for thread in [*workers, chaos_thread]:
            thread.join()
        for _, ch in connected:
            ch.close()
    # Faults stop: the receiver restarts without lost replies, one pass runs, then a last prune.
    cluster.receiver.kill()
    del cluster.receiver.env[FAULTS_ENV]
    cluster.ensure_all()
    settled = settle_and_check(cluster, history)
    chaos.prune()
    # Taken after the final pass (which lists every operation): shown, but not part of the load's figures.
    final = sample(cluster, workdir, time.monotonic() - began)
    series = "\n".join(s.line() for s in [*samples, final])
    legend = "pid/RSS/open fds per service, SQLite file sizes, checkpoint rows all/unsettled"
    print(f"\nsoak time series ({legend}):\n{series}")
    publish(
        "soak",
        {
            "seconds": round(time.monotonic() - began, 1),
            "cases": sum(cases),
            "operations": settled.result.operations,
            "calls": sum(settled.result.calls.values()),
            "indeterminate_calls": settled.result.calls.get("info", 0),
            "lost_replies": _lost_replies(workdir),
            "kills": chaos.kills,
            "reconciler_passes": chaos.passes + 1,
            "prunes": chaos.prunes,
            "checkpoints_pruned": chaos.pruned,
            "checkpoint_rows_max": max(s.checkpoint_rows for s in samples),
            "checkpoint_rows_end": final.checkpoint_rows,
            "unsettled_checkpoint_rows_end": final.unsettled_checkpoint_rows,
            "rss_growth_orchestrator": _growth(samples, "orchestrator0"),
            "rss_growth_receiver": _growth(samples, "receiver"),
            "fds_range_orchestrator": _range(samples, "orchestrator0"),
            "fds_range_receiver": _range(samples, "receiver"),
            "duplicates_found": settled.result.duplicates,
            "decisions_lost": settled.result.decisions_lost,
            "decisions_changed": settled.result.decisions_changed,
            "unknown_left": settled.run.summary.get("still_unknown"),
            **cluster.audit.figures(),
        },
    )
    assert not settled.failures(), "\n".join(settled.failures()[:30])


def _range(samples: list[Sample], name: str) -> str:
    fds = [s.processes[name].fds for s in samples if name in s.processes]
    return f"{min(fds)}-{max(fds)}" if fds else "n/a"


def _lost_replies(workdir: Path) -> int:
    lost = 0
    for log in workdir.glob("receiver-*.stderr"):
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        lost += sum('"fault injected' in line for line in lines)
    return lost
