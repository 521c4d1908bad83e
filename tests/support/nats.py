"""NATS servers with JetStream for the relay's tests: one server, or a cluster of three on loopback, each a
real ``nats-server`` process (Debian's, 2.9) on free ports with its own store directory, killed and restarted
on the same ports and store. Never the machine's own server on :4222. And a consumer that reads a stream to
its end with explicit acknowledgements."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamInfo

from decisionflow_server.foundation.processes import free_port, log_tail

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
REQUIRE_ENV = "DECISIONFLOW_REQUIRE_NATS"


def nats_required() -> bool:
    """Whether a missing nats-server fails the tests that need one (CI) rather than skipping them."""
    return os.environ.get(REQUIRE_ENV) == "1"


def require_nats_server() -> str:
    """The nats-server binary; when it is not installed the test skips naming the package, or fails with
    DECISIONFLOW_REQUIRE_NATS=1 (CI installs it)."""
    if not Path(NATS_SERVER).exists():
        missing = "nats-server is not installed (Debian package nats-server)"
        if nats_required():
            pytest.fail(missing + f" and {REQUIRE_ENV}=1")
        pytest.skip(missing)
    return NATS_SERVER


@dataclass
class NatsNode:
    """One nats-server process: client, monitoring and (in a cluster) route ports, its store and its log."""

    name: str
    directory: Path
    port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    cluster_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        """The client URL."""
        return f"nats://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.directory / f"{self.name}.log"

    def write_config(self, routes: Sequence[int]) -> Path:
        """Write the server's configuration (JetStream on, clustered with routes when given)."""
        store = self.directory / f"{self.name}-store"
        lines = [
            f"server_name: {self.name}",
            f"listen: 127.0.0.1:{self.port}",
            f"http: 127.0.0.1:{self.http_port}",
            f'jetstream {{ store_dir: "{store}" }}',
        ]
        if routes:
            route_urls = ", ".join(f'"nats-route://127.0.0.1:{port}"' for port in routes)
            listen = f"127.0.0.1:{self.cluster_port}"
            lines.append(f"cluster {{ name: relaytest, listen: {listen}, routes: [{route_urls}] }}")
        config = self.directory / f"{self.name}.conf"
        config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return config

    def start(self) -> None:
        """Start the server on its ports and store (its configuration written first)."""
        assert self.process is None or self.process.poll() is not None, f"{self.name} is running"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [require_nats_server(), "-c", str(self.directory / f"{self.name}.conf")],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.starts += 1

    def healthy(self) -> bool:
        """Whether the monitoring endpoint answers /healthz with 200 (JetStream up and current)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/healthz", timeout=1) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_healthy(self, timeout: float = 60) -> None:
        """Wait until healthy; fail the test with the log's tail otherwise."""
        deadline = time.monotonic() + timeout
        while not self.healthy():
            assert self.process is not None and self.process.poll() is None, log_tail(self.log_path)
            assert time.monotonic() < deadline, f"{self.name} not healthy:\n{log_tail(self.log_path)}"
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the server."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(15)

    def stop(self) -> None:
        """SIGTERM the server, SIGKILL it if it lingers."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class NatsCluster:
    """One or three nats-server processes; servers is the URL list a client is given."""

    nodes: list[NatsNode]

    @property
    def servers(self) -> str:
        """Comma-separated client URLs of every node."""
        return ",".join(node.url for node in self.nodes)

    def node(self, name: str) -> NatsNode:
        """The node named name."""
        return next(node for node in self.nodes if node.name == name)

    def close(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()


def start_nats(directory: Path, size: int = 1) -> NatsCluster:
    """Start size servers (1, or a cluster of 3 with routes to each other) and wait until each is healthy."""
    require_nats_server()
    directory.mkdir(parents=True, exist_ok=True)
    nodes = [NatsNode(f"n{i + 1}", directory) for i in range(size)]
    for node in nodes:
        node.write_config([other.cluster_port for other in nodes if other is not node] if size > 1 else [])
    cluster = NatsCluster(nodes)
    try:
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_healthy()
    except BaseException:
        cluster.close()
        raise
    return cluster


@dataclass(frozen=True)
class Delivery:
    """One message a consumer received: its stream sequence, subject, Nats-Msg-Id and payload."""

    sequence: int
    subject: str
    message_id: str
    headers: dict[str, str]
    payload: bytes
    stored_at: datetime

    def document(self) -> dict[str, object]:
        """The payload as JSON."""
        loaded = json.loads(self.payload)
        assert isinstance(loaded, dict)
        return loaded


async def _stream_info(servers: str, stream: str) -> StreamInfo:
    nc = await nats.connect(servers=servers.split(","), connect_timeout=2, max_reconnect_attempts=2)
    try:
        return await nc.jetstream(timeout=5).stream_info(stream)
    finally:
        await nc.close()


def stream_messages(servers: str, stream: str) -> int:
    """The messages the stream holds, as its state says."""
    return int(asyncio.run(_stream_info(servers, stream)).state.messages)


def stream_leader(servers: str, stream: str, timeout: float = 30) -> str:
    """The name of the stream's leader, as the JetStream API's stream info says (waits for one)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
            info = asyncio.run(_stream_info(servers, stream))
            leader = None if info.cluster is None else info.cluster.leader
            if leader:
                return leader
        assert time.monotonic() < deadline, f"stream {stream} has no leader after {timeout:.0f} s"
        time.sleep(0.2)


async def _consume(servers: str, stream: str, subjects: str, durable: str, batch: int) -> list[Delivery]:
    nc = await nats.connect(servers=servers.split(","), connect_timeout=2, max_reconnect_attempts=5)
    received: list[Delivery] = []
    try:
        js = nc.jetstream(timeout=10)
        subscription = await js.pull_subscribe(
            subjects,
            durable=durable,
            stream=stream,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL, ack_wait=30),
        )
        while True:
            try:
                messages = await subscription.fetch(batch, timeout=2)
            except TimeoutError:  # nats-py's, or asyncio's when fetch's own deadline ran out first
                info = await subscription.consumer_info()
                if info.num_pending == 0 and info.num_ack_pending == 0:
                    return received
                continue
            for message in messages:
                headers = dict(message.headers or {})
                received.append(
                    Delivery(
                        message.metadata.sequence.stream,
                        message.subject,
                        headers.get("Nats-Msg-Id", ""),
                        headers,
                        message.data,
                        message.metadata.timestamp,
                    )
                )
                await message.ack_sync()
    finally:
        await nc.close()


def consume_all(servers: str, stream: str, subjects: str, durable: str = "check", batch: int = 256) -> list[Delivery]:
    """Every message of the stream from its first, read by a durable pull consumer that acknowledges
    each explicitly, until none is pending."""
    return asyncio.run(_consume(servers, stream, subjects, durable, batch))
