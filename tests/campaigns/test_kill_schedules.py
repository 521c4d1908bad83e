"""Seeded random kill schedules across the receiver, the orchestrator(s) and a reconciler loop.

A schedule (drawn from its seed) is a tiny workload, a few cases each started, approved or
declined and sometimes retried or contradicted, run by concurrent reviewers, while a chaos
thread SIGKILLs processes at random moments and restarts them on their ports. Then the faults
stop, one ``decisionflow-reconciler --once`` pass runs, and the invariants are checked on the
schedule's cases: at most one effect per operation id, exactly one for every approved
operation, none for the others, every decision a client was told is the one recorded, nothing
left Unknown. The processes are reused from schedule to schedule (each has its own cases);
``--seed S`` replays schedule S alone on a fresh stack (the same plan; thread timing may differ).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from decisionflow.client import Decision
from tests.campaigns.cluster import Cluster
from tests.campaigns.history import History
from tests.campaigns.report import publish, replay_hint
from tests.campaigns.workload import Reviewer, body_for, operation_id_of, settle_and_check
from tests.support.campaigns import CampaignOptions

RECONCILER = "reconciler"
LOOP_INTERVAL_SECONDS = 0.2
START_TRIES = 3
MAX_FAILED_SCHEDULES = 3  # then stop: the seeds printed are enough to replay


@dataclass(frozen=True)
class Kill:
    """SIGKILL target at `at` seconds into the schedule, restart it after downtime."""

    at: float
    target: str
    downtime: float


@dataclass(frozen=True)
class Lane:
    """One reviewer's calls on one case, in order."""

    case: str
    orchestrator: int
    calls: tuple[str, ...]  # "approve" / "decline" after the start
    pauses: tuple[float, ...]  # before the start and before each call: spreads calls over the kill window


@dataclass(frozen=True)
class Schedule:
    """The plan of one seed: lanes run concurrently, kills by the chaos thread."""

    seed: int
    lanes: tuple[Lane, ...]
    kills: tuple[Kill, ...]


def plan(seed: int, orchestrators: int) -> Schedule:
    """Draw the schedule of seed: 2-3 cases, 1-3 kills among receiver, orchestrators and reconciler."""
    rng = random.Random(seed)
    lanes = []
    for c in range(rng.randint(2, 3)):
        first = "approve" if rng.random() < 0.7 else "decline"
        calls = [first]
        if rng.random() < 0.5:
            calls.append(first)  # a retry: the same decision again
        if rng.random() < 0.2:
            calls.append("decline" if first == "approve" else "approve")  # a contradiction: a conflict
        pauses = tuple(round(rng.uniform(0.0, 0.2), 3) for _ in range(len(calls) + 1))
        lanes.append(Lane(f"S{seed}-{c}", rng.randrange(orchestrators), tuple(calls), pauses))
    targets = ["receiver", *(f"orchestrator{i}" for i in range(orchestrators)), RECONCILER]
    kills = sorted(
        (
            Kill(round(rng.uniform(0.0, 0.8), 3), rng.choice(targets), round(rng.uniform(0.0, 0.3), 3))
            for _ in range(rng.randint(1, 3))
        ),
        key=lambda k: k.at,
    )
    return Schedule(seed, tuple(lanes), tuple(kills))


def _run_lane(cluster: Cluster, history: History, schedule: Schedule, lane: Lane) -> None:
    target = cluster.orchestrators[lane.orchestrator].target
    reviewer, ch = Reviewer.connect(f"s{schedule.seed}-{lane.case}", target, history, timeout=2.0)
    try:
        op = None
        time.sleep(lane.pauses[0])
        for _ in range(START_TRIES):
            op = reviewer.start(lane.case)
            if op is not None:
                break
        # Even if every start was lost, its id is known: deciding on it is what a client would try.
        op = op or operation_id_of(lane.case, body_for(lane.case))
        for call, pause in zip(lane.calls, lane.pauses[1:], strict=True):
            time.sleep(pause)
            reviewer.decide(lane.case, op, Decision.APPROVE if call == "approve" else Decision.DECLINE)
    finally:
        ch.close()


def _chaos(cluster: Cluster, schedule: Schedule, began: float, kills: Counter[str]) -> None:
    for kill in schedule.kills:
        time.sleep(max(0.0, began + kill.at - time.monotonic()))
        if kill.target == RECONCILER:
            if cluster.loop is not None:
                cluster.loop.kill()
            time.sleep(kill.downtime)
            cluster.start_loop(LOOP_INTERVAL_SECONDS)
        else:
            server = next(s for s in cluster.servers() if s.name == kill.target)
            server.kill()
            time.sleep(kill.downtime)
            server.start()
        kills[kill.target] += 1


def run_schedule(cluster: Cluster, history: History, schedule: Schedule, kills: Counter[str]) -> list[str]:
    """Run one schedule on a running cluster; return the violations found after the reconciler pass."""
    cluster.ensure_all()
    if cluster.loop is None or not cluster.loop.alive:
        cluster.start_loop(LOOP_INTERVAL_SECONDS)
    began = time.monotonic()
    threads = [
        threading.Thread(target=_run_lane, args=(cluster, history, schedule, lane), name=lane.case)
        for lane in schedule.lanes
    ]
    threads.append(threading.Thread(target=_chaos, args=(cluster, schedule, began, kills), name="chaos"))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Faults stop: the loop is stopped, every server is up, and one pass must settle everything.
    if cluster.loop is not None:
        cluster.loop.kill()
    cluster.ensure_all()
    settled = settle_and_check(cluster, history, [lane.case for lane in schedule.lanes])
    return settled.failures()


def _campaign(
    name: str,
    campaign: CampaignOptions,
    cluster: Cluster,
    history: History,
    request: pytest.FixtureRequest,
    schedules: int,
) -> None:
    cluster.start()
    orchestrators = len(cluster.orchestrators)
    seeds = [campaign.seed] if campaign.seed is not None else [campaign.base_seed + i for i in range(schedules)]
    kills: Counter[str] = Counter()
    failures: list[str] = []
    failed = 0
    started = time.monotonic()
    for seed in seeds:
        schedule = plan(seed, orchestrators)
        problems = run_schedule(cluster, history, schedule, kills)
        if problems:
            failed += 1
            failures.append(f"schedule {schedule}:\n  " + "\n  ".join(problems[:10]))
            failures.append("  " + replay_hint(request.node.nodeid, seed))
            if failed >= MAX_FAILED_SCHEDULES:
                break
    settled = settle_and_check(cluster, history)
    publish(
        name,
        {
            "schedules": len(seeds),
            "orchestrators": orchestrators,
            "kills": sum(kills.values()),
            "kills_by_process": ",".join(f"{k}:{v}" for k, v in sorted(kills.items())),
            "operations": settled.result.operations,
            "calls": sum(settled.result.calls.values()),
            "indeterminate_calls": settled.result.calls.get("info", 0),
            "duplicates_found": settled.result.duplicates,
            "decisions_lost": settled.result.decisions_lost,
            "decisions_changed": settled.result.decisions_changed,
            "unknown_left": settled.run.summary.get("still_unknown"),
            "failed_schedules": failed,
            "seconds": round(time.monotonic() - started, 1),
            **cluster.audit.figures(),
        },
    )
    assert not failures, "\n".join(failures)
    assert not settled.failures(), "\n".join(settled.failures())


@pytest.mark.campaign
@pytest.mark.slow
def test_kill_schedules_sqlite(
    campaign: CampaignOptions,
    make_cluster: Callable[..., Cluster],
    history: History,
    request: pytest.FixtureRequest,
) -> None:
    """--schedules seeded schedules on SQLite: receiver, one orchestrator and a reconciler loop, all killable."""
    _campaign("kill_schedules_sqlite", campaign, make_cluster(), history, request, campaign.schedules)


@pytest.mark.campaign
@pytest.mark.slow
@pytest.mark.postgres
def test_kill_schedules_postgres_two_orchestrators(
    campaign: CampaignOptions,
    make_cluster: Callable[..., Cluster],
    history: History,
    request: pytest.FixtureRequest,
    postgres_url: str,
) -> None:
    """A fifth as many schedules on PostgreSQL with two orchestrator processes, both killable."""
    cluster = make_cluster(postgres_url, orchestrators=2)
    _campaign("kill_schedules_postgres", campaign, cluster, history, request, max(1, campaign.schedules // 5))
