"""The loss of a database server under load: both services on a three-node PostgreSQL cluster under
Patroni (tests.campaigns.patroni), approvals from 16 callers, and the faults a cluster meets:

- node loss: SIGKILL of the leader's Patroni and postmaster together while its standbys are seconds and
  megabytes behind (what the leader sends them dropped, as over a slow link, while it holds a transaction
  that wrote 8 MB): the synchronous standby is promoted once the leader key expires, however far behind
  the leader's last published WAL position it is; the lost node is started again, its first ``pg_rewind``
  fails (as one a switchover cut short did), and Patroni clones it again from the new leader;
- a partition of the leader (it runs on, cut from etcd, its standbys and its clients: its Patroni
  demotes it when it cannot renew the leader key, and a standby is promoted);
- a switchover under load (``patronictl switchover``), as an operator does for maintenance;
- a standby lost while the leader runs (writes go on with the other standby as the synchronous one).

Between faults the cluster is healthy again: every other node streams from the leader on its timeline.
Each service is given one URL naming the three nodes with ``target_session_attrs=read-write``, and
is never restarted: libpq finds the new leader when a pooled connection is replaced. A call during
a failover may only end UNAVAILABLE, past its deadline, or with the outcome Unknown. After the run:
one reconciler pass settles every Unknown, the history holds (nothing acknowledged lost, nothing
changed, no duplicate effect), and every node holds the same decisions and effects.

``--failover-rounds`` runs the three faults more times (default 1); ``--failover-async`` runs the
same campaign on a cluster without synchronous replication (reported beside it, not asserted: an
asynchronous standby may be promoted without the last commits).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path

import psycopg
import pytest

from decisionflow.client import ReviewClient
from decisionflow.retry import NO_RETRY
from tests.campaigns import patroni
from tests.campaigns.cluster import Cluster
from tests.campaigns.history import Event, History, load
from tests.campaigns.patroni import PatroniCluster
from tests.campaigns.report import publish
from tests.campaigns.workload import CAMPAIGN_POLICY, Reviewer, channel, review_until, settle_and_check
from tests.support.campaigns import failed, on_failure

CALLERS = 16  # half with the campaign's retries, half with none, so a failover reaches them
LOAD_SECONDS = 3.0
# How long the standbys are held behind (their WAL receivers starved) before the leader is killed; and, in
# synchronous mode, the transaction it holds open meanwhile and how far behind its last published WAL position
# the synchronous standby must be when it dies (four times the 1 MB maximum_lag_on_failover that once kept the
# cluster without a leader).
LAG_SECONDS = 1.0
BURST_BYTES = 8 << 20
BEHIND_BYTES = 4 << 20
# How long a fault may leave writes refused, from the last success before they stalled to the first after
# (docs/deployment.md): the leader key outlives the old leader's last renewal by up to ttl; the synchronous
# standby's Patroni acts on its next loop (loop_wait) and first asks the other members, 2 s at most each (a
# silent old leader takes all of it); the promotion; then a new connection gives each silent host connect_timeout
# (2 s) before it reaches the new leader, and a caller retries. Measured from the stall, a loss also counts the
# seconds its standbys were held before the kill. ttl + 5 s was the goal once: from the stall, failovers took
# 25.1 s and 25.3 s. On a shared two-core machine two runs in
# twelve took 32.6 s and 35.9 s (the others 21.2 s to 29.5 s); in the second, the other standby took 15 s to
# follow the new leader, and strict mode let no commit through until one did; standbys now retry their stream
# every second (wal_retrieve_retry_interval 1 s, not 5 s). The campaign allows a loaded machine 10 s past the
# bound, so that CI on a shared machine fails on a failover that hangs, not on one a busy scheduler slowed.
OUTAGE_BOUND_SECONDS = patroni.TTL_SECONDS + 10
LOADED_MACHINE_ALLOWANCE_SECONDS = 10
OUTAGE_ENDINGS = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN"}


@pytest.fixture
def database_cluster(request: pytest.FixtureRequest) -> Iterator[PatroniCluster]:
    """Three nodes under the pinned Patroni, synchronous unless --failover-async."""
    patroni_bin = patroni.install_patroni()
    synchronous = not request.config.getoption("--failover-async")
    with patroni.patroni_cluster(patroni_bin, synchronous=synchronous) as cluster:
        on_failure(request, "the Patroni nodes' logs", cluster.log_tails)
        yield cluster
        cluster.keep = failed(request)


class Faults:
    """The faults of one run, applied in turn, each noted with when it began and ended."""

    def __init__(self, cluster: PatroniCluster, history: History) -> None:
        self.cluster = cluster
        self.history = history
        self.applied: list[tuple[str, float, float]] = []
        self.held_before_kill: list[float] = []  # per leader loss, how long its standbys were held before the kill

    def chosen(self, names: str) -> list[Callable[[], None]]:
        """The faults named (comma-separated), in the order given."""
        table = {
            "leader_lost": self.lose_leader,
            "leader_partitioned": self.partition_leader,
            "switchover": self.switchover,
            "standby_lost": self.lose_standby,
        }
        return [table[name.strip()] for name in names.split(",")]

    def _noted(self, name: str, fault: Callable[[], None]) -> None:
        began = self.history.now()
        fault()
        self.applied.append((name, began, self.history.now()))

    def lose_leader(self) -> None:
        """SIGKILL the leader while its standbys lag LAG_SECONDS (and, synchronous, BEHIND_BYTES) behind; wait
        for a new one; start the lost node again, fail its first pg_rewind, and wait until it streams."""
        leader = self.cluster.leader()
        assert leader is not None
        self._noted("leader_lost", lambda: self._kill_lagging_and_wait_for_new_leader(leader))
        time.sleep(LOAD_SECONDS)
        # Its timeline diverged (it wrote what its standbys never received), so it must be rewound.
        self.cluster.fail_next_rewind(leader)
        self.cluster.start_node(leader)
        self.cluster.wait_healthy()
        assert self.cluster.rewind_failed(leader), f"{leader.name} rejoined without a pg_rewind to fail"

    def _kill_lagging_and_wait_for_new_leader(self, leader: patroni.Node) -> None:
        # Synchronous: the commits of the lag wait for a standby and are never acknowledged, and neither is
        # the burst, which never commits. Asynchronous: the commits are acknowledged, and the standby promoted
        # never receives them (no burst: there the lag limit is what bounds that loss, and it would rightly
        # refuse to promote). The standbys stay starved until a new leader is there: the dead leader's kernel
        # would otherwise deliver what it had queued for them, which a machine that died would not.
        standby = self.cluster.synchronous_standby()
        burst = self.cluster.write_burst(leader, BURST_BYTES) if standby else nullcontext()
        held_from = self.history.now()
        with self.cluster.lagging(leader), burst:
            time.sleep(LAG_SECONDS)
            if standby is not None:
                self.cluster.wait_for(
                    lambda: (self.cluster.lag_bytes(standby) or 0) >= BEHIND_BYTES,
                    f"the synchronous standby {standby.name} {BEHIND_BYTES >> 20} MB behind",
                )
            self.held_before_kill.append(round(self.history.now() - held_from, 2))
            self.cluster.kill(leader)
            self.cluster.wait_for(lambda: self.cluster.leader() not in (None, leader), "a new leader")

    def switchover(self) -> None:
        """Switch the leader over to a standby and wait until the old leader streams from it."""
        candidate = self.cluster.standbys()[0]
        self._noted("switchover", lambda: self.cluster.switchover(candidate))
        self.cluster.wait_healthy()

    def partition_leader(self) -> None:
        """Cut the leader from etcd, its standbys and its clients while it runs; heal after a new leader
        has served a while, and wait until the old one streams from it."""
        leader = self.cluster.leader()
        assert leader is not None
        self._noted("leader_partitioned", lambda: self._partition_and_wait_for_new_leader(leader))
        time.sleep(LOAD_SECONDS)
        self.cluster.heal(leader)
        self.cluster.wait_healthy()

    def _partition_and_wait_for_new_leader(self, leader: patroni.Node) -> None:
        self.cluster.partition(leader)
        self.cluster.wait_for(lambda: self.cluster.leader() not in (None, leader), "a new leader")

    def lose_standby(self) -> None:
        """SIGKILL the synchronous standby while the leader runs; start it again after a while."""
        members = self.cluster.members()
        sync = [m["name"] for m in members if m.get("role") == "sync_standby"]
        standby = self.cluster.by_name(sync[0]) if sync else self.cluster.standbys()[0]
        self._noted("standby_lost", lambda: self.cluster.kill(standby))
        time.sleep(LOAD_SECONDS)
        self.cluster.start_node(standby)
        self.cluster.wait_healthy()


def _longest_gap(events: list[Event], began: float, ended: float) -> float:
    """The longest time between successful calls from began to ended: how long writes were refused."""
    oks = sorted(e.time for e in events if e.type == "ok" and began <= e.time <= ended)
    marks = [began, *oks, ended]
    return round(max(b - a for a, b in itertools.pairwise(marks)), 2)


def _outages(
    events: list[Event], applied: list[tuple[str, float, float]], ended: float
) -> list[tuple[str, float, float]]:
    """Per fault, the longest pause in successful calls that ended after it began and before the next fault
    began: measured from the last success before writes stalled (which may come before the fault's own last
    step, a kill, or even its first) to the first after they resumed. With it, when the pause began, in seconds
    from the fault's start (negative: before it)."""
    oks = sorted(e.time for e in events if e.type == "ok")
    starts = [began for _, began, _ in applied]
    outages = []
    for (name, began, _), until in zip(applied, [*starts[1:], ended], strict=True):
        pauses = [(b - a, a) for a, b in itertools.pairwise([*oks, ended]) if began < b <= until]
        seconds, stalled = max(pauses, default=(until - began, began))
        outages.append((name, round(seconds, 2), round(stalled - began, 2)))
    return outages


def _count(cluster: PatroniCluster, node: patroni.Node, database: str, table: str) -> int:
    return int(cluster.query(node, database, f"SELECT count(*) FROM {table}")[0][0])


def _same_on_every_node(cluster: PatroniCluster) -> dict[str, list[int]]:
    """Decisions and effects counted on each node, once every standby has replayed what the leader has."""
    counts: dict[str, list[int]] = {}
    for _ in range(120):
        try:
            counts = {
                "decisions": [_count(cluster, n, "orchestrator", "decisions") for n in cluster.nodes],
                "effects": [_count(cluster, n, "receiver", "effects") for n in cluster.nodes],
            }
        except psycopg.OperationalError:
            time.sleep(0.5)  # a node rejoining restarts its PostgreSQL
            continue
        if all(len(set(values)) == 1 for values in counts.values()):
            break
        time.sleep(0.5)
    return counts


@pytest.mark.campaign
@pytest.mark.slow
def test_database_failover_under_load_loses_nothing(
    database_cluster: PatroniCluster, history: History, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    rounds = int(request.config.getoption("--failover-rounds"))
    cluster = database_cluster
    for name in ("orchestrator", "receiver"):
        leader = cluster.leader()
        assert leader is not None
        cluster.query(leader, "postgres", f'CREATE DATABASE "{name}"')
    workdir = tmp_path / "services"
    workdir.mkdir()
    services = Cluster.create(workdir, cluster.url("receiver"), cluster.url("orchestrator"))
    faults = Faults(cluster, history)
    stop = threading.Event()
    channels = []
    try:
        services.start()
        reviewers = []
        for i in range(CALLERS):
            ch = channel(services.orchestrators[0].target)
            channels.append(ch)
            policy = CAMPAIGN_POLICY if i % 2 == 0 else NO_RETRY
            reviewers.append(Reviewer(f"caller{i}", ReviewClient(ch, timeout=5.0, policy=policy), history))
        threads = [threading.Thread(target=review_until, args=(r, stop), name=r.name) for r in reviewers]
        began = history.now()
        for thread in threads:
            thread.start()
        try:
            for _ in range(rounds):
                for fault in faults.chosen(request.config.getoption("--failover-faults")):
                    time.sleep(LOAD_SECONDS)
                    fault()
            time.sleep(LOAD_SECONDS)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        ended = history.now()
        starts = {s.name: s.starts for s in services.servers()}
        alive = {s.name: s.alive for s in services.servers()}
        # The faults are over once commits are prompt again on both databases: once, just after a lost standby
        # rejoined, they stalled about a second, and the settling pass's re-drives that met the stall stayed Unknown.
        for name in ("receiver", "orchestrator"):
            cluster.wait_for(lambda name=name: cluster.commits_promptly(name), f"prompt commits in {name}")
        settled = settle_and_check(services, history)
        counts = _same_on_every_node(cluster)
    finally:
        for ch in channels:
            ch.close()
        services.close()

    events = load(history.path)
    endings = Counter(f"{e.type}:{e.outcome or 'ok'}" for e in events if e.type != "invoke")
    bad_endings = {
        k: v for k, v in endings.items() if not k.startswith("ok:") and k.split(":", 1)[1] not in OUTAGE_ENDINGS
    }
    longest = _longest_gap(events, began, ended)
    outages = _outages(events, faults.applied, ended)
    publish(
        "database_failover" + ("" if cluster.synchronous else "_async"),
        {
            "replication": "synchronous" if cluster.synchronous else "asynchronous",
            "faults": ",".join(f"{name}:{end - start:.1f}s" for name, start, end in faults.applied),
            "calls": sum(endings.values()),
            "ok": sum(v for k, v in endings.items() if k.startswith("ok:")),
            "failures_by_status": ",".join(f"{k}={v}" for k, v in sorted(endings.items()) if not k.startswith("ok")),
            "unknown_outcomes_told": sum(1 for e in events if e.outcome == "UNKNOWN"),
            "longest_write_outage_seconds": longest,
            "write_outage_per_fault_seconds": ",".join(f"{name}:{seconds}" for name, seconds, _ in outages),
            "write_stall_began_after_fault_seconds": ",".join(f"{name}:{began}" for name, _, began in outages),
            "standbys_held_before_kill_seconds": ",".join(map(str, faults.held_before_kill)),
            "service_starts": ",".join(f"{k}:{v}" for k, v in sorted(starts.items())),
            "operations": settled.result.operations,
            "duplicates_found": settled.result.duplicates,
            "decisions_lost": settled.result.decisions_lost,
            "committed_effects_lost": sum("answered COMMITTED but 0 effects" in v for v in settled.result.violations),
            "decisions_changed": settled.result.decisions_changed,
            "unknown_left": settled.run.summary.get("still_unknown"),
            "settled_by_reconciler": settled.run.summary.get("settled"),
            "rows_per_node": ";".join(f"{k}={'/'.join(map(str, v))}" for k, v in counts.items()),
            **services.audit.figures(),
        },
    )
    if not cluster.synchronous:
        return  # reported beside the synchronous run; what it loses is the figure, not a failure
    assert all(alive.values()) and set(starts.values()) == {1}, ("a service died or was restarted", alive, starts)
    assert not bad_endings, f"calls ended other than OK, UNAVAILABLE, deadline or Unknown: {bad_endings}"
    assert not settled.failures(), "\n".join(settled.failures()[:30])
    assert all(len(set(values)) == 1 for values in counts.values()), f"the nodes differ: {counts}"
    allowed = OUTAGE_BOUND_SECONDS + LOADED_MACHINE_ALLOWANCE_SECONDS
    slow = [outage for outage in outages if outage[1] > allowed]
    assert not slow, f"writes were refused for longer than {allowed} s from the stall: {slow}"
