"""The relay under faults: a cluster of three nats-server nodes with an R3 stream, reviews started and
approved concurrently for ``--relay-seconds``, the relay SIGKILLed and restarted again and again, and
JetStream nodes killed and restarted one at a time: first the stream's leader (found with the JetStream
API's stream info), later another node.

Afterwards the faults stop, the last relay catches up (its cursor reaches the audit log's size), and a
durable pull consumer with explicit acks reads the whole stream. It must hold every sequenced leaf of
the orchestrator's audit log exactly once after deduplication by Nats-Msg-Id, with the leaf's bytes, and
each case's events in log order; nothing missing, nothing foreign. The report gives the events published,
the duplicates JetStream dropped (ack.duplicate, as each relay counted them before it was killed: a
lower bound), the duplicates the consumer saw, and the largest lag from an event's occurred_at to its
storage in the stream (reported, never asserted).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import grpc
import pytest

from decisionflow.v1 import review_pb2_grpc
from decisionflow_relay.domain import DEFAULT_ORIGIN
from tests.campaigns.auditlog import LogAuditor
from tests.campaigns.report import publish
from tests.support.nats import NatsCluster, consume_all, start_nats, stream_leader, stream_messages
from tests.support.relay import RelayProcess, audit_leaves, spawn_relay, wait_for_cursor
from tests.support.stack import Stack, approve, open_stack, start_request

STREAM = "DECISIONFLOW_EVENTS"
REVIEWERS = 4
RELAY_KILL_EVERY = (2.0, 6.0)  # seconds between two SIGKILLs of the relay, drawn uniformly
RELAY_DOWNTIME = (0.1, 1.5)
NODE_DOWNTIME = 4.0
RELAY_FLAGS = ("--stream-replicas", "3", "--publish-timeout-seconds", "2", "--progress-seconds", "5")


@dataclass
class Figures:
    """What the chaos did and what the relays counted before each was killed."""

    relay_kills: int = 0
    node_kills: list[str] = field(default_factory=list)
    published: float = 0
    duplicates: float = 0
    publish_errors: float = 0
    started: int = 0
    workload_errors: Counter[str] = field(default_factory=Counter)


class Relays:
    """The current relay process; killed and started again on the same cursor file."""

    def __init__(self, directory: Path, target: str, servers: str, cursor_file: Path, figures: Figures) -> None:
        self._args = (directory, target, servers, cursor_file)
        self._figures = figures
        self._count = 0
        self.current = self._spawn()

    def _spawn(self) -> RelayProcess:
        self._count += 1
        directory, target, servers, cursor_file = self._args
        return spawn_relay(directory, target, servers, cursor_file, name=f"relay-{self._count}", extra=RELAY_FLAGS)

    def _count_before_end(self) -> None:
        try:
            samples = self.current.metrics()
        except OSError:
            return
        self._figures.published += samples.get("decisionflow_relay_published_total", 0)
        self._figures.duplicates += samples.get("decisionflow_relay_duplicates_total", 0)
        self._figures.publish_errors += samples.get("decisionflow_relay_publish_errors_total", 0)

    def kill_and_restart(self, downtime: float) -> None:
        """SIGKILL the relay (its counters read just before), wait downtime, start a new one."""
        self._count_before_end()
        self.current.service.kill()
        self._figures.relay_kills += 1
        time.sleep(downtime)
        self.current = self._spawn()

    def stop(self) -> int:
        """Stop the relay cleanly (its counters read first); return its exit status."""
        self._count_before_end()
        return self.current.service.stop()


def review_until(stack: Stack, reviewer: int, stop: threading.Event, figures: Figures, lock: threading.Lock) -> None:
    """Start and approve fresh cases until stop is set."""
    stub = review_pb2_grpc.ReviewServiceStub(stack._channel(stack.orchestrator_port))
    number = 0
    while not stop.is_set():
        case_id = f"J-{reviewer}-{number}"
        number += 1
        try:
            started = stub.StartReview(start_request(case_id=case_id), timeout=30)
            stub.Approve(approve(started.proposal.operation_id), timeout=30)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                # The author's call budget (20 StartReviews a second by default): wait as the refusal asks.
                time.sleep(0.2)
                continue
            with lock:
                figures.workload_errors[error.code().name] += 1
            continue
        with lock:
            figures.started += 1


def kill_node(cluster: NatsCluster, name: str, figures: Figures) -> None:
    """SIGKILL one JetStream node, keep it down a few seconds, restart it on its store, wait until healthy."""
    node = cluster.node(name)
    node.kill()
    figures.node_kills.append(name)
    time.sleep(NODE_DOWNTIME)
    node.start()
    node.wait_healthy(120)


def chaos(rng: random.Random, cluster: NatsCluster, relays: Relays, seconds: float, figures: Figures) -> None:
    """Kill the relay every few seconds; at 30% of the run kill the stream's leader, at 65% another node."""
    start = time.monotonic()
    node_faults = [0.30 * seconds, 0.65 * seconds]
    while (elapsed := time.monotonic() - start) < seconds:
        if node_faults and elapsed >= node_faults[0]:
            node_faults.pop(0)
            leader = stream_leader(cluster.servers, STREAM)
            others = [n.name for n in cluster.nodes if n.name != leader and n.name not in figures.node_kills]
            name = leader if not figures.node_kills else rng.choice(others)
            kill_node(cluster, name, figures)
            continue
        time.sleep(rng.uniform(*RELAY_KILL_EVERY))
        relays.kill_and_restart(rng.uniform(*RELAY_DOWNTIME))


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    cluster = start_nats(tmp_path / "nats", size=3)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.mark.campaign
@pytest.mark.slow
def test_the_relay_under_kills_and_a_jetstream_failover_delivers_every_event_once_after_dedup(
    request: pytest.FixtureRequest, tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    """--relay-seconds of approvals, relay kills and node kills: every leaf once after dedup, in case order."""
    seconds = float(request.config.getoption("--relay-seconds"))
    if seconds <= 0:
        raise pytest.UsageError("--relay-seconds must be positive")
    rng = random.Random(20261207)
    figures = Figures()
    stack = open_stack(tmp_path)
    cursor_file = tmp_path / "relay.cursor"
    relays = Relays(tmp_path, f"127.0.0.1:{stack.orchestrator_port}", nats_cluster.servers, cursor_file, figures)
    stop, lock = threading.Event(), threading.Lock()
    reviewers = [
        threading.Thread(target=review_until, args=(stack, i, stop, figures, lock), daemon=True)
        for i in range(REVIEWERS)
    ]
    try:
        first_leader = stream_leader(nats_cluster.servers, STREAM)
        for thread in reviewers:
            thread.start()
        try:
            chaos(rng, nats_cluster, relays, seconds, figures)
        finally:
            stop.set()
            for thread in reviewers:
                thread.join(60)
        leaves = wait_for_cursor(cursor_file, stack.orchestrator_url, relays.current, timeout=300)
        assert relays.stop() == 0, relays.current.service.log()
        deliveries = consume_all(nats_cluster.servers, STREAM, "decisionflow.>")
        stored = stream_messages(nats_cluster.servers, STREAM)
    finally:
        stop.set()
        if relays.current.alive():
            relays.current.service.kill()
        stack.close()

    # Exactly once after deduplication by Nats-Msg-Id: every leaf, nothing else, with its bytes.
    first: dict[str, int] = {}
    for position, delivery in enumerate(deliveries):
        first.setdefault(delivery.message_id, position)
    expected = {f"{DEFAULT_ORIGIN}/{leaf.index}": leaf for leaf in leaves}
    assert sorted(first) == sorted(expected), (
        f"missing {sorted(set(expected) - set(first))[:10]}, foreign {sorted(set(first) - set(expected))[:10]}"
    )
    unique = [deliveries[position] for position in sorted(first.values())]
    order_by_case: dict[str, list[int]] = {}
    for delivery in unique:
        leaf = expected[delivery.message_id]
        data = delivery.document()["data"]
        assert isinstance(data, dict)
        assert (data["index"], data["case_id"], data["kind"]) == (leaf.index, leaf.case_id, leaf.kind)
        order_by_case.setdefault(leaf.case_id, []).append(leaf.index)
    out_of_order = {case: indices for case, indices in order_by_case.items() if indices != sorted(indices)}
    assert not out_of_order, out_of_order
    assert audit_leaves(stack.orchestrator_url)[1] == 0
    # And the log itself holds, as every campaign's does (tests/campaigns/auditlog.py).
    audit = LogAuditor(stack.orchestrator_url).check()
    assert not audit.failures, audit.failures[:10]

    lags = [
        (delivery.stored_at - datetime.fromisoformat(str(delivery.document()["time"]))).total_seconds()
        for delivery in unique
    ]
    kinds = Counter(leaf.kind for leaf in leaves)
    publish(
        "relay",
        {
            "seconds": seconds,
            "reviews_approved": figures.started,
            "workload_errors": ",".join(f"{code}:{n}" for code, n in sorted(figures.workload_errors.items())) or 0,
            "leaves": len(leaves),
            "proposals": kinds["proposal"],
            "decisions": kinds["decision"],
            "effects": kinds["effect"],
            "relay_kills": figures.relay_kills,
            "node_kills": ",".join(figures.node_kills),
            "first_stream_leader": first_leader,
            "published_at_least": int(figures.published),
            "jetstream_duplicates_dropped_at_least": int(figures.duplicates),
            "publish_errors_at_least": int(figures.publish_errors),
            "stream_messages": stored,
            "consumer_deliveries": len(deliveries),
            "consumer_duplicates": len(deliveries) - len(unique),
            "missing": 0,
            "largest_lag_seconds": round(max(lags, default=0.0), 3),
        },
    )
