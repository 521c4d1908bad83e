"""PostgreSQL restarted under load: the services recover on their own, and no answer is ever wrong.

The receiver and the orchestrator keep their databases on a PostgreSQL server this test owns.
Reviewers start and decide operations from several threads (some with the campaign's retries,
some with none, so the outage reaches them) while the server is restarted with
``pg_ctl restart -m fast`` and then ``-m immediate`` (a crash: no shutdown checkpoint, recovery
from WAL). The services are never restarted. A call during an outage may only end UNAVAILABLE,
past its deadline, or with the outcome Unknown; after each restart calls succeed again; and after
one reconciler pass the history holds: nothing acknowledged was lost, nothing changed, no duplicate.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from decisionflow.client import ReviewClient
from decisionflow.retry import NO_RETRY
from tests.campaigns.cluster import Cluster
from tests.campaigns.history import Event, History, load
from tests.campaigns.pgcluster import PgServer, postgres_server
from tests.campaigns.report import publish
from tests.campaigns.workload import CAMPAIGN_POLICY, Reviewer, channel, review_until, settle_and_check

PATIENT, IMPATIENT = 2, 2
LOAD_BEFORE_SECONDS, LOAD_AFTER_SECONDS = 2.0, 4.0
RESTART_MODES = ("fast", "immediate")
# What a call may end with when the database is away: a retryable refusal, or an outcome left open.
OUTAGE_ENDINGS = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN"}


@pytest.fixture
def server() -> Iterator[PgServer]:
    """A PostgreSQL server of this test's own (restarting the machine's would disturb other tests)."""
    with postgres_server() as made:
        yield made


@dataclass(frozen=True)
class Restart:
    """One ``pg_ctl restart``: its mode and when it began and returned, on the history's clock."""

    mode: str
    began: float
    returned: float


def _recovery_seconds(events: list[Event], restart: Restart) -> float | None:
    """From the restart's return to the end of the first call sent after it that succeeded."""
    invoked = {(e.process, e.op, e.call): e.time for e in events if e.type == "invoke"}
    ok_after = [
        e.time - restart.returned
        for e in events
        if e.type == "ok" and invoked.get((e.process, e.op, e.call), -1.0) >= restart.returned
    ]
    return round(min(ok_after), 3) if ok_after else None


def _failed_after(events: list[Event], restart: Restart, until: float) -> int:
    """Calls sent between the restart's return and until that did not succeed (stale pooled connections)."""
    invoked = {(e.process, e.op, e.call): e.time for e in events if e.type == "invoke"}
    return sum(
        1
        for e in events
        if e.type in ("fail", "info") and restart.returned <= invoked.get((e.process, e.op, e.call), -1.0) < until
    )


def _endings(events: list[Event]) -> Counter[str]:
    return Counter(f"{e.type}:{e.outcome or 'ok'}" for e in events if e.type != "invoke")


@pytest.mark.campaign
@pytest.mark.slow
def test_postgres_restarted_under_load_services_recover_without_restart(
    server: PgServer, history: History, tmp_path: Path
) -> None:
    """Fast and immediate restarts mid-load: only UNAVAILABLE/deadline/Unknown, recovery, and the history holds."""
    for name in ("orchestrator", "receiver"):
        server.query(f'CREATE DATABASE "{name}"')
    workdir = tmp_path / "cluster"
    workdir.mkdir()
    cluster = Cluster.create(workdir, server.url("receiver"), server.url("orchestrator"))
    restarts: list[Restart] = []
    stop = threading.Event()
    channels = []
    try:
        cluster.start()
        reviewers = []
        for i in range(PATIENT + IMPATIENT):
            ch = channel(cluster.orchestrators[0].target)
            channels.append(ch)
            policy = CAMPAIGN_POLICY if i < PATIENT else NO_RETRY
            name = f"patient{i}" if i < PATIENT else f"impatient{i}"
            reviewers.append(Reviewer(name, ReviewClient(ch, timeout=3.0, policy=policy), history))
        threads = [threading.Thread(target=review_until, args=(r, stop), name=r.name) for r in reviewers]
        for thread in threads:
            thread.start()
        try:
            for mode in RESTART_MODES:
                time.sleep(LOAD_BEFORE_SECONDS)
                began = history.now()
                server.restart(mode)
                restarts.append(Restart(mode, began, history.now()))
                time.sleep(LOAD_AFTER_SECONDS)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        starts = {s.name: s.starts for s in cluster.servers()}
        alive = {s.name: s.alive for s in cluster.servers()}
        settled = settle_and_check(cluster, history)
    finally:
        for ch in channels:
            ch.close()
        cluster.close()

    events = load(history.path)
    endings = _endings(events)
    recovery = {r.mode: _recovery_seconds(events, r) for r in restarts}
    bad_endings = {
        k: v for k, v in endings.items() if not k.startswith("ok:") and k.split(":", 1)[1] not in OUTAGE_ENDINGS
    }
    publish(
        "postgres_restart",
        {
            "restarts": ",".join(f"{r.mode}:{r.returned - r.began:.2f}s" for r in restarts),
            "calls": sum(endings.values()),
            "ok": sum(v for k, v in endings.items() if k.startswith("ok:")),
            "failures_by_status": ",".join(f"{k}={v}" for k, v in sorted(endings.items()) if not k.startswith("ok")),
            "unknown_outcomes_told": sum(1 for e in events if e.outcome == "UNKNOWN"),
            "failed_within_2s_after_back": ",".join(
                f"{r.mode}:{_failed_after(events, r, r.returned + 2.0)}" for r in restarts
            ),
            "recovery_seconds": ",".join(f"{mode}:{seconds}" for mode, seconds in recovery.items()),
            "service_starts": ",".join(f"{k}:{v}" for k, v in sorted(starts.items())),
            "operations": settled.result.operations,
            "duplicates_found": settled.result.duplicates,
            "decisions_lost": settled.result.decisions_lost,
            "decisions_changed": settled.result.decisions_changed,
            "unknown_left": settled.run.summary.get("still_unknown"),
            **cluster.audit.figures(),
        },
    )
    assert all(alive.values()) and set(starts.values()) == {1}, ("a service died or was restarted", alive, starts)
    assert not bad_endings, f"calls ended other than OK, UNAVAILABLE, deadline or Unknown: {bad_endings}"
    assert all(seconds is not None for seconds in recovery.values()), f"no call succeeded after a restart: {recovery}"
    assert not settled.failures(), "\n".join(settled.failures()[:30])
