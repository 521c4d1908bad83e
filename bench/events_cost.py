"""What the event feed costs the orchestrator, how soon an event reaches a watcher, and what idle streams
hold, measured in one run.

Cost. Two orchestrators run side by side against one receiver, each on its own fresh database, both without
authentication and without the sequencer job (``--audit-interval-seconds 0``, as in the other cost benches):
"no watcher", and "one watcher", whose feed a watcher in a process of its own (``bench/_event_watcher.py``)
streams from now on, reading every event. While that stream is open the watched orchestrator runs a pass of its
feed every ``--events-poll-seconds`` (0.1 s): it sequences the entries waiting, without signing (work the
sequencer job does off the request path when no stream is open), and sends the new events. Each round drives
StartReviews and then their first Approves at 16 in flight through one and then the other (the order alternates
between rounds, so a drift in the machine's load falls on both), reading each orchestrator's CPU to the
nanosecond (``bench._cpu``). The report is the CPU per call of each, summed over the rounds, the ratio watched /
unwatched and the median and quartiles of each round's ratio; the CPU each spends per second of an idle stretch
(the watched one's passes); and what sequencing the unwatched orchestrator's entries costs in this process, per
review, for the share of the difference that is sequencing moved from the sequencer job into the feed.

The relay. Where nats-server is installed (and without ``--no-relay``), a third orchestrator, "relay", on its own
fresh database, takes part in the same alternating rounds with ``decisionflow-relay`` (decisionflow_relay) watching
it from the log's first event and publishing every event into a JetStream stream of a ``nats-server -js`` started on
a free port with its own store. The report is the same table against "no watcher", the relay's cursor (what
JetStream acknowledged) against the events the reviews made, and, once it reached them, the CPU per review of the
relay process and of nats-server from the relay's start (its warm-up and idle stretch included).

Latency. Through the watched orchestrator, StartReviews and then their first Approves at 16 in flight: for each
Approve, the moment its COMMITTED answer reached this process and the moment its effect event reached the
watcher process, both on the machine's monotonic clock, matched by operation id. The report is the count, p50,
p99 and largest of the differences (one is negative when the event reached the watcher before the answer
reached this process's loop).

Idle streams. A fresh orchestrator whose one principal (authentication is off) may hold every stream the bench
opens (``--events-streams-per-principal``); N streams from now on, 50 a connection (under the transport's 64
concurrent streams a connection), each opened once its first heartbeat came. The report is the process's RSS
before and after and per stream, its CPU per second while they sit idle for 12 s (a heartbeat every 5 s each, and
past the connections' 10 s first-call timeout) against before, the latency of an Approve (a review started and
approved one at a time) before they opened and while they are open, whether every stream received those reviews'
events, and any stream refused or ended while open.

    python -m bench.events_cost [--quick] [--postgres-url URL] [--rounds N] [--calls N]
                                [--latency-calls N] [--streams N] [--no-relay] [--events-poll-seconds S]

Prints figures and asserts nothing: ``tests/bench/test_events_cost.py`` only checks that it runs and prints them.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import math
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from bench import _calls, _workload
from bench._cpu import CpuMeter
from bench._databases import Databases, fresh_databases
from bench._load import Call, Sample, drive, percentile
from bench._processes import CHECKPOINT_KEY, ServerProcess
from decisionflow.channels import aio_insecure_channel
from decisionflow.v1 import common_pb2, events_pb2, events_pb2_grpc, review_pb2
from decisionflow_demo.launch import UNLIMITED_AUTHORS, ProcessStack
from decisionflow_server.foundation.processes import ServiceProcess, free_port, launch, log_tail
from decisionflow_server.storage import db
from orchestrator.audit_log.progress import BATCH
from orchestrator.store import OrchestratorStore

REPO = Path(__file__).resolve().parents[1]
IN_FLIGHT = 16
WARMUP_CALLS = 32
QUIET, WATCHED, RELAYED = "no watcher", "one watcher", "relay"
MEASURES = ("StartReview", "first Approve")
# A review writes three leaves, so three events: its proposal, its decision and its effect.
EVENTS_PER_REVIEW = 3
# No sequencer job in the servers: without a stream it works off the request path; with one, the feed's passes
# sequence (and the process's CPU shows them).
SERVER_ARGS = (*UNLIMITED_AUTHORS, "--audit-interval-seconds", "0")
# An idle stretch as long as the feed's heartbeat interval (--events-heartbeat-seconds, 5 s by default).
IDLE_SECONDS = 5.0
# How long the idle streams sit before an Approve is timed beside them: longer than the connections' first-call
# timeout (--first-call-timeout-seconds, 10 s), so a stream that only holds its connection must be kept past it.
IDLE_STREAM_SECONDS = 12.0
STREAMS_PER_CONNECTION = 50
# Reviews started and approved one at a time to time an Approve, before and while the idle streams are open.
PROBES = 5
# How long the bench waits for events to reach their watchers, and for a watcher process to start.
ARRIVAL_WAIT_SECONDS = 60.0
NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
RELAY_MODULE = "decisionflow_relay.main"


def _progress(message: str) -> None:
    sys.stderr.write(f"events-cost: {message}\n")
    sys.stderr.flush()


@dataclass
class Tally:
    """One orchestrator's CPU seconds and completed calls per measure, summed over the rounds."""

    cpu_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(MEASURES, 0.0))
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MEASURES, 0))
    failures: int = 0
    first_failure: str = ""
    # Wall seconds the rounds took, every measure.
    seconds: float = 0.0
    # Each round's CPU milliseconds per call, per measure, in round order.
    per_round: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MEASURES})

    def add(self, measure: str, seconds: float, sample: Sample) -> None:
        """Record one round's CPU seconds and sample of measure."""
        self.cpu_seconds[measure] += seconds
        self.calls[measure] += sample.calls
        self.seconds += sample.seconds
        self.per_round[measure].append(1000 * seconds / sample.calls if sample.calls else 0.0)
        self.failures += sample.failures
        self.first_failure = self.first_failure or sample.first_failure

    def ms_per_call(self, measure: str) -> float:
        """CPU milliseconds per completed call of measure."""
        calls = self.calls[measure]
        return 1000 * self.cpu_seconds[measure] / calls if calls else 0.0

    def reviews_per_second(self) -> float:
        """Reviews (a StartReview and its first Approve) per second of the rounds' wall time."""
        return self.calls["first Approve"] / self.seconds if self.seconds else 0.0

    def review_ms(self) -> float:
        """CPU milliseconds of a StartReview and its first Approve."""
        return sum(self.ms_per_call(m) for m in MEASURES)

    def review_per_round(self) -> list[float]:
        """Each round's CPU milliseconds of a StartReview and its first Approve."""
        return [sum(values) for values in zip(*(self.per_round[m] for m in MEASURES), strict=True)]


@dataclass(frozen=True, slots=True)
class Arrival:
    """An event as it reached a watcher process: when (monotonic nanoseconds), its index, kind and operation."""

    at_ns: int
    index: int
    kind: str
    operation_id: str


class Watcher:
    """A watcher process (``bench._event_watcher``) streaming target's every event from now on; started once its
    stream is open."""

    def __init__(self, target: str, work: Path, name: str) -> None:
        self.path = work / f"{name}.events"
        self.path.touch()
        self._stderr_path = work / f"{name}.stderr"
        with self._stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bench._event_watcher", target, str(self.path)],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        stdout: IO[bytes] = self.process.stdout  # type: ignore[assignment]
        ready, _, _ = select.select([stdout], [], [], ARRIVAL_WAIT_SECONDS)
        line = stdout.readline().decode("ascii", "replace") if ready else ""
        if not line.startswith("ready "):
            self.stop()
            tail = self._stderr_path.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise SystemExit(f"events-cost: the watcher of {target} did not open its stream: {tail}")
        self.start_index = int(line.split()[1])

    def arrivals(self) -> list[Arrival]:
        """Every event the watcher received so far, in arrival order."""
        found = []
        for line in self.path.read_text(encoding="ascii").splitlines():
            at_ns, index, kind, operation_id = line.split(" ")
            found.append(Arrival(int(at_ns), int(index), kind, operation_id))
        return found

    def wait_for(self, count: int) -> list[Arrival]:
        """The arrivals once count of them came, or ARRIVAL_WAIT_SECONDS went by."""
        deadline = time.monotonic() + ARRIVAL_WAIT_SECONDS
        while len(arrivals := self.arrivals()) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return arrivals

    def stop(self) -> None:
        """End the watcher process."""
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(15)


class Relay:
    """A nats-server with JetStream on a free port (its own store) and decisionflow-relay relaying target's feed
    into it from the log's first event."""

    def __init__(self, target: str, work: Path) -> None:
        self.port = free_port()
        (store := work / "nats-store").mkdir()
        with (work / "nats-server.log").open("wb") as log:
            self.nats = subprocess.Popen(
                [NATS_SERVER, "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.cursor_file = work / "relay.cursor"
        self.service: ServiceProcess | None = None
        self._await(self._nats_listens, "nats-server does not listen", work / "nats-server.log")
        metrics_port = free_port()
        args = [
            "--orchestrator-target",
            target,
            "--nats-url",
            f"nats://127.0.0.1:{self.port}",
            "--cursor-file",
            str(self.cursor_file),
            "--metrics-port",
            str(metrics_port),
        ]
        self.service = launch(RELAY_MODULE, args, work, "relay", announces_port=False)
        self._metrics_port = metrics_port
        self._await(self._relay_serves, "the relay serves no metrics", self.service.log_path)
        self.meter = CpuMeter({"relay": self.service.pid, "nats-server": self.nats.pid})
        self.started_cpu = self.meter.snapshot()

    def _await(self, ready: Any, what: str, log: Path) -> None:
        deadline = time.monotonic() + ARRIVAL_WAIT_SECONDS
        while not ready():
            alive = self.nats.poll() is None and (self.service is None or self.service.process.poll() is None)
            if not alive or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"events-cost: {what}:\n{log_tail(log, 40)}")
            time.sleep(0.1)

    def _nats_listens(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def _relay_serves(self) -> bool:
        # The relay serves its metrics once it connected to NATS and made sure of its stream.
        connection = http.client.HTTPConnection("127.0.0.1", self._metrics_port, timeout=5)
        try:
            connection.request("GET", "/metrics")
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    def acknowledged(self, count: int) -> int:
        """The relay's stored cursor (every event below it acknowledged by JetStream) once it reaches count, or
        after ARRIVAL_WAIT_SECONDS."""
        deadline = time.monotonic() + ARRIVAL_WAIT_SECONDS
        while True:
            try:
                cursor = int(self.cursor_file.read_text(encoding="ascii"))
            except (OSError, ValueError):
                cursor = 0
            if cursor >= count or time.monotonic() > deadline:
                return cursor
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the relay, then nats-server."""
        if self.service is not None:
            self.service.stop()
        if self.nats.poll() is None:
            self.nats.terminate()
        self.nats.wait(15)


def render_relay(relay: Relay, reviews: int) -> str:
    """What JetStream acknowledged of the relayed orchestrator's reviews' events, and then the relay's and
    nats-server's own CPU per review over the whole run."""
    expected = EVENTS_PER_REVIEW * reviews
    acknowledged = relay.acknowledged(expected)
    used = relay.meter.snapshot()
    each = ", ".join(
        f"{name} {1000 * (used[name] - relay.started_cpu[name]) / reviews if reviews else 0.0:.3f} ms"
        for name in sorted(used)
    )
    return (
        f"  JetStream acknowledged {acknowledged} of the {expected} events the relayed orchestrator's reviews made "
        "(the relay's cursor)\n"
        f"  CPU per review outside the orchestrator, from the relay's start until then (warm-up and idle stretch "
        f"included, {reviews} reviews): {each}"
    )


async def _round(clients: _calls.Clients, meter: CpuMeter, tally: Tally, calls: int, tag: str) -> None:
    tags = [f"{tag}-{i:05d}" for i in range(calls)]
    before = meter.snapshot()["orchestrator"]
    started, operation_ids = await _calls.start_reviews(clients, tags, IN_FLIGHT)
    middle = meter.snapshot()["orchestrator"]
    approved = await _calls.approvals(clients, operation_ids, IN_FLIGHT, replay=False)
    after = meter.snapshot()["orchestrator"]
    tally.add("StartReview", middle - before, started)
    tally.add("first Approve", after - middle, approved)


@dataclass
class CostRun:
    """The cost rounds' tallies, and each orchestrator's CPU per second of an idle stretch."""

    tallies: dict[str, Tally]
    idle_ms_per_second: dict[str, float]


async def _measure(
    orchestrators: dict[str, ServerProcess],
    receiver: ServerProcess,
    rounds: int,
    calls: int,
    run_id: str,
) -> CostRun:
    """Alternating rounds through each orchestrator (a warm-up first, not measured)."""
    clients = {name: _calls.Clients(o.target, receiver.target, receiver.target) for name, o in orchestrators.items()}
    meters = {name: CpuMeter({"orchestrator": o.pid}) for name, o in orchestrators.items()}
    tallies = {name: Tally() for name in orchestrators}
    slot = {name: index for index, name in enumerate(orchestrators)}
    try:
        for name in orchestrators:
            _progress(f"warming up the orchestrator with {name} ({WARMUP_CALLS} reviews, not measured)")
            warm = Tally()
            await _round(clients[name], meters[name], warm, WARMUP_CALLS, f"{run_id}-w{slot[name]}")
            if warm.failures:
                raise SystemExit(
                    f"events-cost: the orchestrator with {name} failed a warm-up call: {warm.first_failure}"
                )
        _progress(f"an idle stretch of {IDLE_SECONDS:g} s")
        before = {name: meter.snapshot()["orchestrator"] for name, meter in meters.items()}
        started = time.perf_counter()
        await asyncio.sleep(IDLE_SECONDS)
        elapsed = time.perf_counter() - started
        idle = {name: 1000 * (meters[name].snapshot()["orchestrator"] - before[name]) / elapsed for name in meters}
        for number in range(1, rounds + 1):
            order = list(orchestrators) if number % 2 else list(reversed(orchestrators))
            for name in order:
                _progress(f"round {number}/{rounds}: {calls} StartReviews and first Approves, {name}")
                await _round(clients[name], meters[name], tallies[name], calls, f"{run_id}-r{number}-{slot[name]}")
    finally:
        for client in clients.values():
            await client.close()
    return CostRun(tallies, idle)


def _spread(values: list[float]) -> str:
    # CPU is read to the nanosecond (bench._cpu); only where the process's CPU clock cannot be read does it come
    # in clock ticks (10 ms), and then a round of a few calls can read as no CPU, with nothing to divide.
    if not values:
        return "none: no round measured the orchestrator's CPU (read in clock ticks here)"
    quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return f"{statistics.median(values):.3f} [{quartiles[0]:.3f}, {quartiles[2]:.3f}]"


def _ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    # Each round's ratio, from the two orchestrators' runs back to back in that round.
    return [n / d for n, d in zip(numerators, denominators, strict=True) if d]


def render_cost(run: CostRun, other: str, title: str, database: str, rounds: int, calls: int) -> str:
    """The table of CPU per call with no watcher and with other, their ratio and each round's ratio's median and
    quartiles, and the failed calls."""
    quiet, watched = run.tallies[QUIET], run.tallies[other]
    lines = [
        f"{title} ({database}, {rounds} alternating rounds of {calls} reviews each at {IN_FLIGHT} in flight;"
        " orchestrator CPU per call)",
        f"  {'':<22}{QUIET:>12}{other:>13}{'difference':>12}{'ratio':>8}   per-round ratio: median [quartiles]",
    ]
    rows = [
        (m, quiet.ms_per_call(m), watched.ms_per_call(m), quiet.per_round[m], watched.per_round[m]) for m in MEASURES
    ]
    rows.append(
        (
            "StartReview + Approve",
            quiet.review_ms(),
            watched.review_ms(),
            quiet.review_per_round(),
            watched.review_per_round(),
        )
    )
    for measure, was, now, was_rounds, now_rounds in rows:
        ratio = now / was if was else 0.0
        lines.append(
            f"  {measure:<22}{was:>9.3f} ms{now:>10.3f} ms{1000 * (now - was):>+9.0f} µs{ratio:>8.3f}   "
            f"{_spread(_ratios(now_rounds, was_rounds))}"
        )
    lines.append(f"  failed calls: {quiet.failures + watched.failures}")
    return "\n".join(lines)


def render_idle_cpu(run: CostRun) -> str:
    """Each orchestrator's CPU per second of the idle stretch, and what the watched one's extra comes to per
    review at the pace of its rounds."""
    each = ", ".join(f"{ms:.2f} ms {name}" for name, ms in run.idle_ms_per_second.items())
    pace = run.tallies[WATCHED].reviews_per_second()
    extra = run.idle_ms_per_second[WATCHED] - run.idle_ms_per_second[QUIET]
    share = 1000 * extra / pace if pace else 0.0
    return (
        f"  idle CPU per second ({IDLE_SECONDS:g} s with no call): {each} (a watched one's: its feed's passes)\n"
        f"  the watched orchestrator's rounds ran at {pace:.0f} reviews/s: at that pace its passes' idle cost, "
        f"{extra:+.2f} ms a second, comes to {share:+.0f} µs a review"
    )


def _received(watcher: Watcher, expected: int) -> str:
    arrivals = watcher.wait_for(expected)
    indices = [a.index for a in arrivals]
    in_order = indices == list(range(watcher.start_index, watcher.start_index + len(indices)))
    return (
        f"  the watcher received {len(arrivals)} events of the {expected} the watched orchestrator's reviews made "
        f"({EVENTS_PER_REVIEW} a review), {'each once, in index order' if in_order else 'NOT each once in order'}"
    )


def _sequencing(url: str, quiet: Tally, watched: Tally) -> str:
    """Sequence the unwatched orchestrator's backlog in this process, without signing, as the feed's passes do."""
    engine = db.create_engine(url)
    try:
        store = OrchestratorStore(engine)
        sequenced = 0
        started = time.process_time()
        while True:
            done = store.sequence_audit_log(BATCH, None, datetime.now(UTC)).sequenced
            sequenced += done
            if done < BATCH:
                break
        cpu = time.process_time() - started
    finally:
        engine.dispose()
    per_leaf = 1e6 * cpu / sequenced if sequenced else 0.0
    per_review = EVENTS_PER_REVIEW * per_leaf
    review = 1000 * quiet.review_ms()
    difference = 1000 * (watched.review_ms() - quiet.review_ms())
    share = per_review / review if review else 0.0
    return (
        f"  sequencing the unwatched orchestrator's {sequenced} entries in this process (no signing, batches of "
        f"{BATCH}): {per_leaf:.0f} µs a leaf, {per_review:.0f} µs a review of {EVENTS_PER_REVIEW} leaves = "
        f"{100 * share:.1f}% of its StartReview and first Approve (the difference above: {difference:+.0f} µs); "
        "without a stream the sequencer job does this work off the request path, with one the feed's passes do"
    )


@dataclass
class Latencies:
    """Each Approve's answer-to-effect-event delay at the watcher, in milliseconds, and what went wrong."""

    delays_ms: list[float]
    missing: int
    failures: int
    first_failure: str


async def _latencies(clients: _calls.Clients, watcher: Watcher, calls: int, tag: str) -> Latencies:
    tags = [f"{tag}-{i:05d}" for i in range(calls)]
    started, operation_ids = await _calls.start_reviews(clients, tags, IN_FLIGHT)
    answered: dict[str, int] = {}

    def one(operation_id: str) -> Call:
        request = review_pb2.ApproveRequest(operation_id=operation_id, decision=common_pb2.DECISION_APPROVE)

        async def call() -> None:
            answer = await clients.review.Approve(request, timeout=_calls.CALL_TIMEOUT_SECONDS)
            at_ns = time.monotonic_ns()
            if answer.outcome != common_pb2.OUTCOME_COMMITTED or answer.replay:
                raise _calls.UnexpectedAnswer(
                    f"Approve {operation_id}: outcome {answer.outcome}, replay {answer.replay}"
                )
            answered[operation_id] = at_ns

        return call

    approved = await drive([one(op) for op in operation_ids if op], IN_FLIGHT)
    deadline = time.monotonic() + ARRIVAL_WAIT_SECONDS
    while True:
        effects = {
            a.operation_id: a.at_ns for a in watcher.arrivals() if a.kind == "effect" and a.operation_id in answered
        }
        if len(effects) == len(answered) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    delays = [(effects[op] - at_ns) / 1e6 for op, at_ns in answered.items() if op in effects]
    failures = started.failures + approved.failures
    return Latencies(delays, len(answered) - len(effects), failures, started.first_failure or approved.first_failure)


def render_latency(latencies: Latencies, database: str, poll_seconds: float) -> str:
    """The answer-to-event delays' count, p50, p99 and largest."""
    delays = latencies.delays_ms
    early = sum(1 for d in delays if d < 0)
    return "\n".join(
        [
            f"event latency ({database}; first Approves at {IN_FLIGHT} in flight, from each COMMITTED answer reaching "
            "the bench to its effect event reaching a watcher process, one monotonic clock; --events-poll-seconds "
            f"{poll_seconds:g})",
            f"  count {len(delays)}, p50 {percentile(delays, 0.5):.1f} ms, p99 {percentile(delays, 0.99):.1f} ms, "
            f"largest {max(delays, default=0.0):.1f} ms ({early} arrived before the answer reached the bench; "
            f"{latencies.missing} never arrived within {ARRIVAL_WAIT_SECONDS:g} s; failed calls: {latencies.failures})",
        ]
    )


@dataclass
class IdleStreams:
    """What N idle streams did to one orchestrator process."""

    streams: int
    rss_before_kib: int
    rss_after_kib: int
    cpu_before_ms_per_second: float
    cpu_open_ms_per_second: float
    approve_before_ms: list[float]
    approve_open_ms: list[float]
    events_each: int
    streams_with_every_event: int
    refused: int
    ended: int
    first_error: str


async def _probe(clients: _calls.Clients, tag: str) -> list[float]:
    """Start and approve PROBES reviews one at a time; each Approve's latency in milliseconds."""
    latencies = []
    for index in range(PROBES):
        request = _workload.start_review_request(f"{tag}-{index}")
        answer = await clients.review.StartReview(request, timeout=_calls.CALL_TIMEOUT_SECONDS)
        approve = review_pb2.ApproveRequest(
            operation_id=answer.proposal.operation_id, decision=common_pb2.DECISION_APPROVE
        )
        started = time.perf_counter()
        decided = await clients.review.Approve(approve, timeout=_calls.CALL_TIMEOUT_SECONDS)
        latencies.append(1000 * (time.perf_counter() - started))
        if decided.outcome != common_pb2.OUTCOME_COMMITTED:
            raise _calls.UnexpectedAnswer(f"Approve {approve.operation_id}: outcome {decided.outcome}")
    return latencies


async def _cpu_per_second(meter: CpuMeter, seconds: float) -> float:
    before = meter.snapshot()["orchestrator"]
    started = time.perf_counter()
    await asyncio.sleep(seconds)
    return 1000 * (meter.snapshot()["orchestrator"] - before) / (time.perf_counter() - started)


class IdleWatchers:
    """count WatchEvents streams from now on to target, STREAMS_PER_CONNECTION a connection, each counting the
    events it receives; a stream refused, or ended once open, is counted and the first error kept."""

    def __init__(self, target: str, count: int) -> None:
        options = [("grpc.use_local_subchannel_pool", 1)]
        connections = math.ceil(count / STREAMS_PER_CONNECTION)
        self.channels = [aio_insecure_channel(target, options=options) for _ in range(connections)]
        self.count = count
        self.received = [0] * count
        self.refused = 0
        self.ended = 0
        self.errors: list[str] = []
        self._settled = 0
        self._all_settled = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def _settle(self) -> None:
        self._settled += 1
        if self._settled == self.count:
            self._all_settled.set()

    async def _stream(self, index: int) -> None:
        stub = events_pb2_grpc.EventServiceStub(self.channels[index // STREAMS_PER_CONNECTION])
        call: Any = stub.WatchEvents(events_pb2.WatchEventsRequest(from_now=True))
        first = True
        try:
            async for message in call:
                if first:
                    first = False
                    self._settle()
                if message.HasField("event"):
                    self.received[index] += 1
        except asyncio.CancelledError:
            call.cancel()
            raise
        except Exception as exc:  # a stream refused or ended is counted and reported
            self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            if first:
                self.refused += 1
                self._settle()
            else:
                self.ended += 1

    async def open(self) -> None:
        """Open every stream and wait until each has its first heartbeat (or was refused)."""
        self._tasks = [asyncio.create_task(self._stream(i)) for i in range(self.count)]
        await asyncio.wait_for(self._all_settled.wait(), ARRIVAL_WAIT_SECONDS * 2)

    async def complete(self, events: int) -> int:
        """Wait until every open stream received events events (or ARRIVAL_WAIT_SECONDS went by); how many did."""
        deadline = time.monotonic() + ARRIVAL_WAIT_SECONDS
        while self._with(events) < self.open_streams and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return self._with(events)

    @property
    def open_streams(self) -> int:
        """The streams open now: neither refused nor ended."""
        return self.count - self.refused - self.ended

    def _with(self, events: int) -> int:
        return sum(1 for r in self.received if r >= events)

    async def close(self) -> None:
        """Cancel every stream and close the connections."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(channel.close(None) for channel in self.channels))


async def _idle_streams(orchestrator: ServerProcess, receiver: ServerProcess, count: int, run_id: str) -> IdleStreams:
    clients = _calls.Clients(orchestrator.target, receiver.target, receiver.target)
    meter = CpuMeter({"orchestrator": orchestrator.pid})
    watchers = IdleWatchers(orchestrator.target, count)
    try:
        _progress(f"warming up the idle-streams orchestrator ({WARMUP_CALLS} reviews, not measured)")
        tags = [f"{run_id}-iw-{i:05d}" for i in range(WARMUP_CALLS)]
        _, operation_ids = await _calls.start_reviews(clients, tags, IN_FLIGHT)
        await _calls.approvals(clients, operation_ids, IN_FLIGHT, replay=False)
        before_probe = await _probe(clients, f"{run_id}-ip0")
        cpu_before = await _cpu_per_second(meter, IDLE_SECONDS)
        rss_before = orchestrator.rss_kib()
        _progress(f"opening {count} idle streams on {len(watchers.channels)} connections")
        await watchers.open()
        await asyncio.sleep(1.0)
        rss_after = orchestrator.rss_kib()
        _progress(f"{watchers.open_streams} streams open; {IDLE_STREAM_SECONDS:g} s idle, then {PROBES} Approves")
        cpu_open = await _cpu_per_second(meter, IDLE_STREAM_SECONDS)
        open_probe = await _probe(clients, f"{run_id}-ip1")
        expected = EVENTS_PER_REVIEW * PROBES
        complete = await watchers.complete(expected)
    finally:
        await watchers.close()
        await clients.close()
    return IdleStreams(
        count,
        rss_before,
        rss_after,
        cpu_before,
        cpu_open,
        before_probe,
        open_probe,
        expected,
        complete,
        watchers.refused,
        watchers.ended,
        watchers.errors[0] if watchers.errors else "",
    )


def render_idle(idle: IdleStreams, database: str) -> str:
    """RSS before, after and per stream, CPU per idle second, an Approve's latency before and with the streams."""
    per_stream = (idle.rss_after_kib - idle.rss_before_kib) / idle.streams if idle.streams else 0.0
    lines = [
        f"idle streams ({database}; {idle.streams} WatchEvents streams from now on, {STREAMS_PER_CONNECTION} a "
        "connection, on one orchestrator process)",
        f"  RSS {idle.rss_before_kib / 1024:.1f} MiB before, {idle.rss_after_kib / 1024:.1f} MiB with the streams "
        f"open: {per_stream:+.1f} KiB per stream",
        f"  CPU per second idle: {idle.cpu_before_ms_per_second:.2f} ms before, {idle.cpu_open_ms_per_second:.2f} ms "
        f"with the streams open ({IDLE_STREAM_SECONDS:g} s, past the connections' first-call timeout)",
        f"  an Approve answered in {statistics.median(idle.approve_open_ms):.1f} ms with the streams open "
        f"(median of {PROBES}, largest {max(idle.approve_open_ms):.1f} ms; "
        f"{statistics.median(idle.approve_before_ms):.1f} ms before they opened)",
        f"  streams that received all {idle.events_each} events of those reviews: {idle.streams_with_every_event} of "
        f"{idle.streams}; refused: {idle.refused}; ended while open: {idle.ended}"
        + (f" (first: {idle.first_error})" if idle.first_error else ""),
    ]
    return "\n".join(lines)


def _cost(
    processes: ProcessStack,
    databases: dict[str, Databases],
    relaying: tuple[bool, bool],
    sizes: tuple[int, int],
    run_id: str,
    stack: ExitStack,
    server_args: Sequence[str],
) -> tuple[dict[str, ServerProcess], Watcher, int]:
    """The cost rounds and their report; the orchestrators (still running), the watcher and the failed calls."""
    rounds, calls = sizes
    relay_too, no_relay = relaying  # the relay runs; it was left out by --no-relay
    work, kind = processes.workdir, databases[QUIET].kind
    assert processes.receiver is not None
    names = (QUIET, WATCHED, RELAYED) if relay_too else (QUIET, WATCHED)
    orchestrators = {
        name: processes.start_orchestrator(
            f"orchestrator-{name.replace(' ', '-')}", database_url=databases[name].orchestrator_url, args=server_args
        )
        for name in names
    }
    watcher = Watcher(orchestrators[WATCHED].target, work, "watcher")
    stack.callback(watcher.stop)
    relay = None
    if relay_too:
        _progress(f"starting nats-server and decisionflow-relay watching the orchestrator {RELAYED}")
        relay = Relay(orchestrators[RELAYED].target, work)
        stack.callback(relay.stop)
    run = asyncio.run(_measure(orchestrators, processes.receiver, rounds, calls, run_id))
    print(render_cost(run, WATCHED, "event feed's cost", kind, rounds, calls), flush=True)
    print(render_idle_cpu(run), flush=True)
    reviews = WARMUP_CALLS + run.tallies[WATCHED].calls["first Approve"]
    print(_received(watcher, EVENTS_PER_REVIEW * reviews), flush=True)
    print(_sequencing(databases[QUIET].orchestrator_url, run.tallies[QUIET], run.tallies[WATCHED]), flush=True)
    if relay is not None:
        title = "the relay into NATS JetStream's cost to the orchestrator"
        print(render_cost(run, RELAYED, title, kind, rounds, calls), flush=True)
        print(render_relay(relay, WARMUP_CALLS + run.tallies[RELAYED].calls["first Approve"]), flush=True)
        relay.stop()
        orchestrators.pop(RELAYED).stop()
    else:
        why = "--no-relay" if no_relay else f"{NATS_SERVER} is not installed"
        print(f"the relay into NATS JetStream: not measured ({why})", flush=True)
    failed = 0
    for name, tally in run.tallies.items():
        failed += tally.failures
        if tally.first_failure:
            _progress(f"the orchestrator {name}'s first failed call: {tally.first_failure}")
    return orchestrators, watcher, failed


def main(argv: Sequence[str] | None = None) -> int:
    """Run the three measurements once and print their figures."""
    cli = argparse.ArgumentParser(prog="python -m bench.events_cost", description=__doc__.split("\n\n")[0])
    cli.add_argument(
        "--quick",
        action="store_true",
        help="2 rounds of 48 reviews, 200 timed Approves, 200 streams (default: 16 rounds of 200, 1000, 1000)",
    )
    cli.add_argument("--postgres-url", help="run on fresh PostgreSQL databases made next to this one")
    cli.add_argument("--rounds", type=int, help="alternating cost rounds")
    cli.add_argument("--calls", type=int, help="StartReviews (and as many first Approves) per round per orchestrator")
    cli.add_argument("--latency-calls", type=int, help="first Approves whose event latency is measured")
    cli.add_argument("--streams", type=int, help="idle WatchEvents streams to open")
    cli.add_argument("--no-relay", action="store_true", help="leave out the round with the relay into JetStream")
    cli.add_argument(
        "--events-poll-seconds",
        type=float,
        help="every orchestrator's --events-poll-seconds (default: the server's own, 0.1 s)",
    )
    ns = cli.parse_args(argv)
    rounds = max(1, ns.rounds if ns.rounds is not None else (2 if ns.quick else 16))
    calls = max(1, ns.calls if ns.calls is not None else (48 if ns.quick else 200))
    latency_calls = max(1, ns.latency_calls if ns.latency_calls is not None else (200 if ns.quick else 1000))
    streams = max(1, ns.streams if ns.streams is not None else (200 if ns.quick else 1000))
    relay_too = not ns.no_relay and Path(NATS_SERVER).exists()
    poll = () if ns.events_poll_seconds is None else ("--events-poll-seconds", str(ns.events_poll_seconds))
    server_args = (*SERVER_ARGS, *poll)
    poll_seconds = ns.events_poll_seconds or 0.1
    run_id = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="decisionflow-events-cost-") as scratch, ExitStack() as stack:
        work = Path(scratch)
        databases: dict[str, Databases] = {}
        for name in (QUIET, WATCHED, RELAYED, "idle"):
            (where := work / name.replace(" ", "-")).mkdir()
            databases[name] = stack.enter_context(fresh_databases(where, ns.postgres_url))
        kind = databases[QUIET].kind
        processes = ProcessStack(work, databases[QUIET].receiver_url, databases[QUIET].orchestrator_url, CHECKPOINT_KEY)
        stack.callback(processes.close)
        _progress(
            f"starting a receiver and an orchestrator with no watcher, one watched, one relayed ({kind}) in {work}"
        )
        receiver = processes.start_receiver("receiver")
        if not relay_too and not ns.no_relay:
            _progress(f"no round with the relay: {NATS_SERVER} is not installed")
        orchestrators, watcher, failed = _cost(
            processes, databases, (relay_too, ns.no_relay), (rounds, calls), run_id, stack, server_args
        )

        _progress(f"{latency_calls} first Approves through the watched orchestrator, each event's latency")
        latencies = asyncio.run(_measured_latencies(orchestrators[WATCHED], receiver, watcher, latency_calls, run_id))
        print(render_latency(latencies, kind, poll_seconds), flush=True)
        failed += latencies.failures + latencies.missing
        if latencies.first_failure:
            _progress(f"a latency call failed: {latencies.first_failure}")
        watcher.stop()
        for orchestrator in orchestrators.values():
            orchestrator.stop()

        _progress(f"starting a fresh orchestrator for {streams} idle streams")
        idle_orchestrator = processes.start_orchestrator(
            "orchestrator-idle-streams",
            database_url=databases["idle"].orchestrator_url,
            args=(*server_args, "--events-streams-per-principal", str(max(16, streams))),
        )
        idle = asyncio.run(_idle_streams(idle_orchestrator, receiver, streams, run_id))
        print(render_idle(idle, kind), flush=True)
        failed += idle.refused + idle.ended
    return 1 if failed else 0


async def _measured_latencies(
    orchestrator: ServerProcess, receiver: ServerProcess, watcher: Watcher, calls: int, run_id: str
) -> Latencies:
    clients = _calls.Clients(orchestrator.target, receiver.target, receiver.target)
    try:
        return await _latencies(clients, watcher, calls, f"{run_id}-lat")
    finally:
        await clients.close()


if __name__ == "__main__":
    sys.exit(main())
