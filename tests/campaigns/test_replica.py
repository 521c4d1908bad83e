"""A real streaming replica that lags: eventual NOT_FOUND never re-drives, and one pass settles after catch-up.

The receiver writes to a PostgreSQL primary and answers Lookup/BatchLookup from a hot standby
made by ``pg_basebackup -R`` (``--replica-database-url``: answers say EVENTUAL). Replay is paused
on the standby, then operations are approved while the receiver loses every reply after its
commit, so each ends Unknown with its effect on the primary only. Reconciler passes while the
standby lags must see eventual NOT_FOUND and keep every operation UNKNOWN without a single Apply.
Once replay resumes and the standby has replayed the primary's WAL position, one pass settles
every operation as COMMITTED, still without a re-drive, and the history holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from decisionflow.client import Consistency, Decision, LookupStatus, OperationsClient, OperationState, ReceiverClient
from tests.campaigns.cluster import Cluster, ReconcilerRun
from tests.campaigns.history import History, load
from tests.campaigns.pgcluster import StreamingPair, streaming_pair
from tests.campaigns.report import publish
from tests.campaigns.workload import Reviewer, channel, settle_and_check
from tests.support.campaigns import CampaignOptions

FAILPOINTS_ENV = "DECISIONFLOW_RECEIVER_FAILPOINTS"
LOSE_EVERY_REPLY = "receiver.commit_then_lose_reply=raise"
CONCURRENCY = 4
PASSES_WHILE_LAGGING = 2


def count_applies(workdir: Path) -> int:
    """Apply calls the receiver processes in workdir committed or replayed (their log lines)."""
    applies = 0
    for log in workdir.glob("receiver-*.stderr"):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("{"):
                entry = json.loads(line)
                applies += entry.get("rpc") == "Apply" and str(entry.get("message", "")).startswith("effect")
    return applies


@pytest.fixture
def pair() -> Iterator[StreamingPair]:
    """A primary and its streaming replica, owned by this test."""
    with streaming_pair() as made:
        yield made


def _effects_per_operation(pair: StreamingPair) -> dict[str, int]:
    rows = pair.primary.query("SELECT operation_id, count(*) FROM effects GROUP BY operation_id", database="receiver")
    return {str(op): int(n) for op, n in rows}


def _states(cluster: Cluster, ops: list[str]) -> dict[str, OperationState]:
    ch = channel(cluster.orchestrators[0].target)
    try:
        listing = OperationsClient(ch, timeout=10).list_operations(page_size=1000)
        return {v.operation_id: v.state for v in listing if v.operation_id in set(ops)}
    finally:
        ch.close()


def _lookups(cluster: Cluster, ops: list[str]) -> set[tuple[LookupStatus, Consistency]]:
    ch = channel(cluster.receiver.target)
    try:
        return {(a.status, a.consistency) for a in ReceiverClient(ch, timeout=10).batch_lookup(ops).results}
    finally:
        ch.close()


def _lagging_pass(cluster: Cluster, count: int) -> ReconcilerRun:
    run = cluster.reconcile_once()
    summary = run.summary
    assert summary.get("redriven") == 0, "a re-drive on an eventual NOT_FOUND:\n" + run.describe()
    # Alerting (exit 1) is right: every operation is still open and older than the 0 s threshold.
    assert run.exitcode == 1, run.describe()
    assert summary.get("examined") == count, run.describe()
    assert summary.get("settled") == 0, run.describe()
    assert summary.get("still_unknown") == count, run.describe()
    return run


@pytest.mark.campaign
@pytest.mark.slow
def test_lagging_replica_never_redrives_and_one_pass_settles_after_catch_up(
    pair: StreamingPair, campaign: CampaignOptions, history: History, tmp_path: Path
) -> None:
    """Eventual NOT_FOUND keeps Unknowns UNKNOWN with no Apply; after catch-up one pass settles all, 0 duplicates."""
    count = max(4, campaign.operations // 50)
    primary_url, replica_url = pair.create_database("receiver")
    workdir = tmp_path / "cluster"
    workdir.mkdir()
    cluster = Cluster.create(workdir, primary_url, f"sqlite:///{workdir / 'orchestrator.db'}")
    cluster.receiver.argv += ["--replica-database-url", replica_url]
    cluster.receiver.env[FAILPOINTS_ENV] = LOSE_EVERY_REPLY
    try:
        cluster.start()
        pair.wait_caught_up()  # the replica has the receiver's schema before it stops replaying
        pair.pause_replay()
        reviewer, ch = Reviewer.connect("reviewer", cluster.orchestrators[0].target, history, timeout=2.0)

        def approve(i: int) -> str:
            case = f"R-{i}"
            op = reviewer.start(case)
            assert op is not None, reviewer.last_error
            reviewer.decide(case, op, Decision.APPROVE)
            return op

        began = time.monotonic()
        try:
            with ThreadPoolExecutor(CONCURRENCY) as pool:
                ops = list(pool.map(approve, range(count)))
        finally:
            ch.close()
        # Faults stop: the receiver answers again (still reading lookups from the paused replica).
        cluster.receiver.kill()
        del cluster.receiver.env[FAILPOINTS_ENV]
        cluster.receiver.start()

        applies_before = count_applies(workdir)
        assert _effects_per_operation(pair) == dict.fromkeys(ops, 1)
        assert set(_states(cluster, ops).values()) == {OperationState.UNKNOWN}
        assert _lookups(cluster, ops) == {(LookupStatus.NOT_FOUND, Consistency.EVENTUAL)}
        lag = pair.lag_bytes()
        assert lag > 0

        lagging = [_lagging_pass(cluster, count) for _ in range(PASSES_WHILE_LAGGING)]
        assert count_applies(workdir) == applies_before, "Apply was called while the replica lagged"
        assert _effects_per_operation(pair) == dict.fromkeys(ops, 1)
        assert set(_states(cluster, ops).values()) == {OperationState.UNKNOWN}

        pair.resume_replay()
        catch_up = pair.wait_caught_up()
        settled = settle_and_check(cluster, history)
        applies_after = count_applies(workdir)
    finally:
        cluster.close()
    unknown_told = sum(1 for e in load(history.path) if e.call == "approve" and e.outcome == "UNKNOWN")
    publish(
        "replica_lag",
        {
            "operations": count,
            "unknown_outcomes_told": unknown_told,
            "apply_calls_before_passes": applies_before,
            "apply_calls_after_all_passes": applies_after,
            "replica_lag_bytes": lag,
            "passes_while_lagging": len(lagging),
            "noted_while_lagging": ",".join(str(run.summary.get("noted")) for run in lagging),
            "redriven_while_lagging": sum(int(run.summary.get("redriven", 0)) for run in lagging),
            "catch_up_seconds": round(catch_up, 3),
            "settled_after_catch_up": settled.run.summary.get("settled"),
            "redriven_after_catch_up": settled.run.summary.get("redriven"),
            "unknown_left": settled.run.summary.get("still_unknown"),
            "duplicates_found": settled.result.duplicates,
            "effects": len(settled.observed.effects),
            "seconds": round(time.monotonic() - began, 1),
            **cluster.audit.figures(),
        },
    )
    assert not settled.failures(), "\n".join(settled.failures())
    assert settled.run.summary.get("settled") == count, settled.run.describe()
    assert settled.run.summary.get("redriven") == 0, settled.run.describe()
    assert applies_after == applies_before, "the settling pass called Apply"
    assert {e.operation_id for e in settled.observed.effects} == set(ops)
