"""Receiver test helpers: canonical payloads, an in-process server on a free port, receiver processes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa

from decisionflow import db
from decisionflow.v1 import effect_receiver_pb2, effect_receiver_pb2_grpc
from effect_receiver.config import ReceiverConfig
from effect_receiver.main import ReceiverServer, create_server

CASE_ID = "T-1042"
BODY = "Thanks for the report. This is a known firmware issue; version 4.2.1 fixes it.\n"


def new_operation_id() -> str:
    """A fresh, well-formed operation id (random: each test gets its own keys)."""
    return "op-v1-" + hashlib.sha256(uuid.uuid4().bytes).hexdigest()


def payload_for(operation_id: str, case_id: str = CASE_ID, /, **overrides: Any) -> bytes:
    """The canonical JSON payload the orchestrator would send for operation_id; overrides replace fields."""
    document: dict[str, Any] = {
        "operation_id": operation_id,
        "case_id": case_id,
        "action": "record_support_review",
        "body": BODY,
        "evidence_id": "ev-v1-" + "1" * 64,
        "policy_id": "pol-v1-" + "2" * 64,
        "reviewer": "rita@example.com",
        "decision": "APPROVE",
        "decided_at": "2026-11-29T20:53:00.123456+00:00",
    }
    document.update(overrides)
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def apply_request(
    operation_id: str, case_id: str = CASE_ID, payload: bytes | None = None, digest: str | None = None
) -> effect_receiver_pb2.ApplyRequest:
    """An ApplyRequest whose digest matches its payload unless digest is given."""
    if payload is None:
        payload = payload_for(operation_id, case_id)
    return effect_receiver_pb2.ApplyRequest(
        operation_id=operation_id,
        case_id=case_id,
        kind="record_support_review",
        payload=payload,
        payload_digest=hashlib.sha256(payload).hexdigest() if digest is None else digest,
    )


def closed_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def count_rows(database_url: str) -> tuple[int, int]:
    """Return (effects, support review records) stored in the database, read on a fresh engine."""
    engine = db.create_engine(database_url, pool_size=1)
    try:
        with engine.connect() as conn:
            effects = conn.execute(sa.text("SELECT count(*) FROM effects")).scalar_one()
            records = conn.execute(sa.text("SELECT count(*) FROM support_review_records")).scalar_one()
    finally:
        engine.dispose()
    return int(effects), int(records)


class InProcessReceiver:
    """A receiver started by create_server on its own event loop thread, with a sync channel to it."""

    def __init__(self, config: ReceiverConfig) -> None:
        self.config = config
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="receiver-loop", daemon=True)
        self._thread.start()
        try:
            self.running: ReceiverServer = self.run(create_server(config))
        except BaseException:
            self._end_loop()
            raise
        self.port = self.running.port
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = effect_receiver_pb2_grpc.EffectReceiverServiceStub(self.channel)
        self._stopped = False

    def run(self, coroutine: Any, timeout: float = 30) -> Any:
        """Run coroutine on the server's event loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def stop(self, grace: float = 1.0) -> None:
        """Shut the server down gracefully and end its loop thread (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.run(self.running.stop(grace))
        finally:
            self.channel.close()
            self._end_loop()

    def _end_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


StartReceiver = Callable[..., InProcessReceiver]


@pytest.fixture
def start_receiver(tmp_path: Path) -> Iterator[StartReceiver]:
    """Start in-process receivers (port 0) with ReceiverConfig overrides; all are stopped afterwards."""
    started: list[InProcessReceiver] = []

    def start(**overrides: Any) -> InProcessReceiver:
        base = ReceiverConfig(address="127.0.0.1:0", database_url=f"sqlite:///{tmp_path / 'receiver.db'}")
        receiver = InProcessReceiver(replace(base, **overrides))
        started.append(receiver)
        return receiver

    yield start
    for receiver in reversed(started):
        receiver.stop()


@dataclass
class ReceiverProcess:
    """A decisionflow-receiver child process and the port it announced."""

    process: subprocess.Popen[bytes]
    port: int
    stdout_path: Path
    stderr_path: Path

    def stderr(self) -> str:
        """Everything the process wrote to stderr so far."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")


def spawn_receiver(
    workdir: Path, database_url: str, *, failpoints: str = "", name: str = "receiver", timeout: float = 20
) -> ReceiverProcess:
    """Start a receiver process on a free port and wait until it has written its port file."""
    port_file = workdir / f"{name}.port"
    stdout_path, stderr_path = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_RECEIVER_")}
    env["DECISIONFLOW_RECEIVER_FAILPOINTS"] = failpoints
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "effect_receiver.main",
                "--address",
                "127.0.0.1:0",
                "--database-url",
                database_url,
                "--port-file",
                str(port_file),
                "--shutdown-grace-seconds",
                "5",
            ],
            stdout=out,
            stderr=err,
            env=env,
        )
    deadline = time.monotonic() + timeout
    while not port_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise AssertionError(f"receiver {name} did not start:\n{stderr_path.read_text()}")
        time.sleep(0.05)
    return ReceiverProcess(process, int(port_file.read_text()), stdout_path, stderr_path)


@pytest.fixture
def receiver_processes() -> Iterator[list[ReceiverProcess]]:
    """Receiver processes a test starts; any still running are killed afterwards."""
    processes: list[ReceiverProcess] = []
    yield processes
    for child in processes:
        if child.process.poll() is None:
            child.process.kill()
        child.process.wait(10)
