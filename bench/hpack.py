"""HPACK amplification against the services: ``python -m bench.hpack`` (``make hpack-bench``).

A peer without credentials opens one connection per round and sends, before it reads the server's
SETTINGS, requests that each insert a 4,000-byte header into the HPACK dynamic table and name it
3,000 times (about 7 KB on the wire, 12 MB of metadata once decoded;
``tests.support.header_amplification``). For the orchestrator and the receiver, each started with
the project's options and then with each candidate (gRPC core arguments, grpc.aio's
``maximum_concurrent_rpcs``, or a setting), it prints:

- the server's resident memory before the rounds, at their peak, once the connections are closed,
  and after the C allocator handed its free memory back (glibc ``malloc_trim``, on SIGUSR1; see
  ``bench._grpc_options``): what the attack leaves in use against what the allocator only keeps;
- where the requests ended: decoded whole and answered by the service (its status: ``INVALID_ARGUMENT``
  from the server's metadata limit), refused by gRPC core for their metadata (``RESOURCE_EXHAUSTED``),
  reset beyond the stream limit, or unanswered;
- whether legitimate calls still work: the largest extra header (on top of a bearer token and a
  ``traceparent``) with which every one of a few authenticated calls was served, before and after.

With the project's options it also runs the peer that acknowledges SETTINGS before sending (a
well-behaved handshake), the one that carries a valid token and the one that opens 4 connections at
once each round; with 8 streams per connection, the one that spreads its requests over 4 connections.
--quick: the project's options only, against the first two peers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench import _report
from bench._grpc_options import GRPC_OPTIONS_ENV, MAXIMUM_CONCURRENT_RPCS_ENV
from bench._processes import CHECKPOINT_KEY
from decisionflow.v1 import effect_receiver_pb2, effect_receiver_pb2_grpc, review_pb2_grpc
from decisionflow_demo.launch import (
    CHECKPOINT_KEYS_ENV,
    ORCHESTRATOR_MODULE,
    RECEIVER_MODULE,
    orchestrator_args,
    receiver_args,
)
from decisionflow_server.foundation.processes import ServiceProcess, launch
from decisionflow_server.runtime.auth import Role, bearer_metadata, issue_token
from tests.support.header_amplification import Amplification, Tally, amplified_round
from tests.support.payloads import new_operation_id
from tests.support.stack import start_request

TRACEPARENT = ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
# Extra header sizes tried for legitimate calls: room for an identity provider's access token.
LEGITIMATE_PADDING = (1024, 2048, 4096, 6144, 7168)
LEGITIMATE_CALLS = 5
KIB = 1024
ROUNDS = 12
REQUESTS = 30


@dataclass(frozen=True, slots=True)
class Candidate:
    """A server configuration to measure: gRPC core arguments and service flags on top of the defaults."""

    name: str
    grpc_options: tuple[tuple[str, int], ...] = ()
    flags: tuple[str, ...] = ()
    maximum_concurrent_rpcs: int | None = None


DEFAULTS = Candidate("project defaults")
EIGHT_STREAMS = Candidate("8 streams per connection", flags=("--max-concurrent-streams", "8"))
CANDIDATES = (
    DEFAULTS,
    Candidate(
        "metadata limits 16 KiB",
        (("grpc.max_metadata_size", 16 * KIB), ("grpc.absolute_max_metadata_size", 16 * KIB)),
    ),
    Candidate(
        "metadata limits 4 KiB", (("grpc.max_metadata_size", 4 * KIB), ("grpc.absolute_max_metadata_size", 4 * KIB))
    ),
    Candidate("HPACK decoder table 0", (("grpc.http2.hpack_table_size.decoder", 0),)),
    Candidate("SETTINGS ack timeout 1 s", (("grpc.http2.settings_timeout", 1000),)),
    EIGHT_STREAMS,
    Candidate("4 calls in Python at once", maximum_concurrent_rpcs=4),
)


@dataclass(frozen=True, slots=True)
class Attacker:
    """How the peer behaves: whether it completes the handshake first, whether it holds a token."""

    name: str
    acknowledge_settings: bool = False
    with_token: bool = False
    connections: int = 1  # per round, opened at once
    spread: bool = True  # the round's requests spread over the connections, else that many on each

    def requests_per_connection(self, requests: int) -> int:
        """The requests sent on each connection of a round of requests."""
        return -(-requests // self.connections) if self.spread else requests


NO_TOKEN = Attacker("no token, SETTINGS unread")
ATTACKERS_ON_DEFAULTS = (
    Attacker("no token, SETTINGS acknowledged", acknowledge_settings=True),
    Attacker("valid token, SETTINGS unread", with_token=True),
    Attacker("no token, 4 connections at once", connections=4, spread=False),
)
# The stream limit is per connection: the same requests spread over 4 connections.
SPREAD = Attacker("no token, spread over 4 connections", connections=4)


@dataclass(frozen=True, slots=True)
class Service:
    """A service under attack: how to start it, the method attacked and a legitimate call."""

    name: str
    module: str
    role: Role
    path: str
    request: Callable[[], bytes]
    call: Callable[[grpc.Channel, tuple[tuple[str, str], ...]], None]
    args: Callable[[Path, Path], list[str]]


def _start_review(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
    request = start_request(case_id=f"T-{uuid.uuid4().hex[:12]}")
    review_pb2_grpc.ReviewServiceStub(channel).StartReview(request, metadata=metadata, timeout=20)


def _lookup(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
    request = effect_receiver_pb2.LookupRequest(operation_id=new_operation_id())
    effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel).Lookup(request, metadata=metadata, timeout=20)


SERVICES = (
    Service(
        "orchestrator",
        ORCHESTRATOR_MODULE,
        Role.AUTHOR,
        "/decisionflow.v1.ReviewService/StartReview",
        lambda: start_request(case_id=f"T-{uuid.uuid4().hex[:12]}").SerializeToString(),
        _start_review,
        lambda workdir, credentials: orchestrator_args(
            f"sqlite:///{workdir / 'orchestrator.db'}",
            "127.0.0.1:9",  # never called: nothing is decided
            extra=["--credentials-file", str(credentials)],
        ),
    ),
    Service(
        "receiver",
        RECEIVER_MODULE,
        Role.EFFECT_READER,
        "/decisionflow.v1.EffectReceiverService/Lookup",
        lambda: effect_receiver_pb2.LookupRequest(operation_id=new_operation_id()).SerializeToString(),
        _lookup,
        lambda workdir, credentials: receiver_args(
            f"sqlite:///{workdir / 'receiver.db'}", extra=["--credentials-file", str(credentials)]
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class Plan:
    """How much to send: rounds one after another, each requests amplified requests (on one connection
    unless the attacker spreads them)."""

    rounds: int = ROUNDS
    requests: int = REQUESTS
    amplification: Amplification = field(default_factory=Amplification)


@dataclass
class Measurement:
    """One service under one candidate and one attacker."""

    service: str
    candidate: Candidate
    attacker: Attacker
    tally: Tally = field(default_factory=Tally)
    rss_before_kib: int = 0
    rss_rounds_kib: list[int] = field(default_factory=list)
    rss_closed_kib: int = 0
    rss_trimmed_kib: int = 0
    legitimate_before: int | None = None
    legitimate_after: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The measurement as plain values."""
        return {
            "service": self.service,
            "candidate": self.candidate.name,
            "grpc_options": [list(option) for option in self.candidate.grpc_options],
            "flags": list(self.candidate.flags),
            "maximum_concurrent_rpcs": self.candidate.maximum_concurrent_rpcs,
            "attacker": self.attacker.name,
            "requests": self.tally.requests,
            "served": self.tally.served,
            "answered_by_service": self.tally.answered,
            "answers_by_status": dict(self.tally.answers),
            "refused_by_grpc": self.tally.refused_by_grpc,
            "reset": self.tally.reset,
            "unanswered": self.tally.unanswered,
            "wire_bytes_per_request": self.tally.wire_bytes // max(1, self.tally.requests),
            "rss_before_kib": self.rss_before_kib,
            "rss_after_rounds_kib": self.rss_rounds_kib,
            "rss_connections_closed_kib": self.rss_closed_kib,
            "rss_after_malloc_trim_kib": self.rss_trimmed_kib,
            "legitimate_padding_served_before": self.legitimate_before,
            "legitimate_padding_served_after": self.legitimate_after,
        }


def _largest_padding_served(service: Service, target: str, token: str) -> int | None:
    """The largest extra header with which every one of a few authenticated calls was served (None:
    not even the smallest)."""
    largest = None
    with grpc.insecure_channel(target, options=[("grpc.enable_retries", 0)]) as channel:
        for padding in LEGITIMATE_PADDING:
            metadata = (*bearer_metadata(token), TRACEPARENT, ("x-padding", "p" * padding))
            try:
                for _ in range(LEGITIMATE_CALLS):
                    service.call(channel, metadata)
            except grpc.RpcError:
                break
            largest = padding
    return largest


def _start(service: Service, candidate: Candidate, workdir: Path) -> tuple[ServiceProcess, str]:
    credentials = workdir / "credentials.json"
    token = issue_token(credentials, "bench", [service.role])
    env = {GRPC_OPTIONS_ENV: json.dumps([list(option) for option in candidate.grpc_options])}
    if candidate.maximum_concurrent_rpcs is not None:
        env[MAXIMUM_CONCURRENT_RPCS_ENV] = str(candidate.maximum_concurrent_rpcs)
    if service.module == ORCHESTRATOR_MODULE:
        env[CHECKPOINT_KEYS_ENV] = CHECKPOINT_KEY
    args = [service.module, *service.args(workdir, credentials), *candidate.flags]
    process = launch("bench._grpc_options", args, workdir, service.name, env=env)
    process.wait_ready(60)
    process.wait_serving()
    return process, token


def measure(
    service: Service,
    candidate: Candidate,
    attacker: Attacker,
    plan: Plan,
    workdir: Path,
    progress: Callable[[str], None],
) -> Measurement:
    """Start the service with the candidate, attack it plan.rounds times, read its memory, stop it."""
    workdir.mkdir(parents=True)
    process, token = _start(service, candidate, workdir)
    result = Measurement(service.name, candidate, attacker)
    try:
        result.legitimate_before = _largest_padding_served(service, process.target, token)
        time.sleep(0.5)
        result.rss_before_kib = process.rss_kib()
        metadata = bearer_metadata(token) if attacker.with_token else []
        for _ in range(plan.rounds):
            result.tally.merge(
                amplified_round(
                    process.port,
                    service.path,
                    service.request(),
                    requests=attacker.requests_per_connection(plan.requests),
                    connections=attacker.connections,
                    amplification=plan.amplification,
                    metadata=metadata,
                    acknowledge_settings=attacker.acknowledge_settings,
                )
            )
            result.rss_rounds_kib.append(process.rss_kib())
        time.sleep(2)
        result.rss_closed_kib = process.rss_kib()
        process.process.send_signal(signal.SIGUSR1)
        time.sleep(1)
        result.rss_trimmed_kib = process.rss_kib()
        result.legitimate_after = _largest_padding_served(service, process.target, token)
    finally:
        process.stop()
    rss = f"{_mib(result.rss_before_kib)} -> {_mib(result.rss_closed_kib)} MiB"
    progress(f"{service.name}, {candidate.name}, {attacker.name}: {rss}")
    return result


def _mib(kib: int) -> str:
    return f"{kib / 1024:.0f}"


def _padding(value: int | None) -> str:
    return "none" if value is None else f"{value // KIB} KiB"


COLUMNS = (
    "service",
    "configuration",
    "attacker",
    "RSS MiB: before, rounds' peak, closed, trimmed",
    "to service",
    "refused by gRPC",
    "reset",
    "unanswered",
    "wire B/req",
    "legit padding before/after",
)


def _row(result: Measurement) -> tuple[str, ...]:
    tally = result.tally
    rss = (
        _mib(result.rss_before_kib),
        _mib(max(result.rss_rounds_kib, default=0)),
        _mib(result.rss_closed_kib),
        _mib(result.rss_trimmed_kib),
    )
    codes = {str(code.value[0]): code.name for code in grpc.StatusCode}
    answers = [f"{tally.served} OK"] if tally.served else []
    answers += [f"{count} {codes.get(status, status)}" for status, count in sorted(tally.answers.items())]
    served = f" ({', '.join(answers)})" if answers else ""
    return (
        result.service,
        result.candidate.name,
        result.attacker.name,
        " -> ".join(rss),
        f"{tally.reached_application}/{tally.requests}{served}",
        str(tally.refused_by_grpc),
        str(tally.reset),
        str(tally.unanswered),
        str(tally.wire_bytes // max(1, tally.requests)),
        f"{_padding(result.legitimate_before)}/{_padding(result.legitimate_after)}",
    )


def render(results: Sequence[Measurement], plan: Plan, machine: dict[str, Any]) -> str:
    """The figures as a text table."""
    amplification = plan.amplification
    rows = [COLUMNS, *(_row(result) for result in results)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(COLUMNS))]
    lines = [
        f"HPACK amplification: {plan.rounds} rounds x {plan.requests} requests, a {amplification.value_bytes}-byte "
        f"header named {amplification.references} times per request "
        f"({amplification.decoded_bytes / 1e6:.1f} MB of metadata decoded)",
        f"machine: {machine['cpu']}, {machine['cores']} cores, load average {machine['load_average_before']} "
        f"before, {machine['load_average_after']} after",
        "",
    ]
    lines += [" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def _progress(message: str) -> None:
    sys.stderr.write(f"bench.hpack: {message}\n")
    sys.stderr.flush()


def _runs(quick: bool) -> list[tuple[Candidate, Attacker]]:
    """What to measure on each service: every candidate against the peer without a token, and the other
    attackers against the project's defaults; quick: the defaults against that peer and the one that
    acknowledges SETTINGS."""
    if quick:
        return [(DEFAULTS, NO_TOKEN), (DEFAULTS, ATTACKERS_ON_DEFAULTS[0])]
    runs = [(candidate, NO_TOKEN) for candidate in CANDIDATES]
    runs += [(DEFAULTS, attacker) for attacker in ATTACKERS_ON_DEFAULTS]
    runs.append((EIGHT_STREAMS, SPREAD))
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every service under every candidate; print the table, optionally write JSON."""
    cli = argparse.ArgumentParser(prog="python -m bench.hpack", description=__doc__.splitlines()[0])
    cli.add_argument("--rounds", type=int, help=f"connections, one after another (default: {ROUNDS}; quick: 4)")
    cli.add_argument("--requests", type=int, default=REQUESTS, help="amplified requests per connection (default: 30)")
    cli.add_argument(
        "--quick",
        action="store_true",
        help="the project defaults only, against the peer with SETTINGS unread and acknowledged",
    )
    cli.add_argument("--workdir", type=Path, help="keep databases and server logs here (default: a temporary dir)")
    cli.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    ns = cli.parse_args(argv)
    rounds = ns.rounds if ns.rounds is not None else 4 if ns.quick else ROUNDS
    plan = Plan(rounds=max(1, rounds), requests=max(1, ns.requests))
    load_before = os.getloadavg()
    results: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="bench-hpack-") as scratch:
        workdir = ns.workdir or Path(scratch)
        for service in SERVICES:
            for index, (candidate, attacker) in enumerate(_runs(ns.quick)):
                run_dir = workdir / f"{service.name}-{index}"
                results.append(measure(service, candidate, attacker, plan, run_dir, _progress))
    machine = _report.machine(load_before, os.getloadavg())
    print(render(results, plan, machine))
    if ns.json is not None:
        document = {
            "plan": {"rounds": plan.rounds, "requests": plan.requests},
            "machine": machine,
            "measurements": [result.as_json() for result in results],
        }
        ns.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
