"""Receiver test helpers: an in-process server on a free port, receiver processes, row counts."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa

from decisionflow.v1 import effect_receiver_pb2_grpc
from decisionflow_demo.launch import RECEIVER_MODULE, receiver_args
from decisionflow_server.foundation.processes import ServiceProcess, spawn
from decisionflow_server.foundation.processes import free_port as closed_port
from decisionflow_server.storage import db
from effect_receiver.config import ReceiverConfig
from effect_receiver.main import ReceiverServer, create_server
from tests.support.payloads import BODY, CASE_ID, apply_request, effect_request, new_operation_id, payload_for

__all__ = [
    "BODY",
    "CASE_ID",
    "InProcessReceiver",
    "ReceiverProcess",
    "apply_request",
    "closed_port",
    "count_rows",
    "effect_request",
    "new_operation_id",
    "payload_for",
    "spawn_receiver",
]


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


# A receiver child process: the shared launcher's type.
ReceiverProcess = ServiceProcess


def spawn_receiver(
    workdir: Path, database_url: str, *, failpoints: str = "", name: str = "receiver", timeout: float = 20
) -> ReceiverProcess:
    """Start a receiver process on a free port and wait until it has written its port file."""
    args = receiver_args(database_url, failpoints=failpoints, extra=["--shutdown-grace-seconds", "5"])
    return spawn(RECEIVER_MODULE, args, workdir, name, timeout=timeout)


@pytest.fixture
def receiver_processes() -> Iterator[list[ReceiverProcess]]:
    """Receiver processes a test starts; any still running are killed afterwards."""
    processes: list[ReceiverProcess] = []
    yield processes
    for child in processes:
        child.kill()
