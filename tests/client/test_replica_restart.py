"""Clients given several orchestrator addresses ride out a replica's restart. Two orchestrator
processes on two ports share one database; the synchronous and the asyncio client (and the CLI) are
given both ports as one target, `127.0.0.1:P1,127.0.0.1:P2`, and a stream of approvals runs while one
replica is stopped and started again, then the other is killed (SIGKILL) and started again. Every
call that retries within its deadline gets an answer: none fails, and each case has one effect."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from decisionflow.channels import open_aio_channel, open_channel
from decisionflow.client import AsyncReviewClient, ReviewClient
from decisionflow.client.views import ApproveResult
from decisionflow.retry import CLIENT_DEFAULT
from decisionflow.v1 import review_pb2_grpc
from decisionflow.vocabulary import Outcome
from decisionflow_server.apps.stack import CHECKPOINT_KEYS_ENV, ORCHESTRATOR_MODULE, orchestrator_args
from decisionflow_server.foundation.processes import ServiceProcess, free_port, spawn
from tests.support.stack import CHECKPOINT_KEY, count, spawn_receiver, start_request

OPERATIONS = 48
# The deadline bounds each call's retries, as the CLI's --timeout does.
WITHIN_DEADLINE = dataclasses.replace(CLIENT_DEFAULT, name="test_replicas", max_attempts=None, max_total_seconds=60.0)


class Replica:
    """One orchestrator process on a port of its own, which it keeps across restarts."""

    def __init__(self, workdir: Path, database_url: str, receiver: ServiceProcess, name: str) -> None:
        self._args = orchestrator_args(database_url, receiver.target, address=f"127.0.0.1:{free_port()}")
        self._workdir = workdir
        self.name = name
        self.process = self._spawn()

    def _spawn(self) -> ServiceProcess:
        keys = {CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY}
        return spawn(ORCHESTRATOR_MODULE, self._args, self._workdir, self.name, env=keys)

    @property
    def target(self) -> str:
        return self.process.target

    def restart(self, *, crash: bool) -> None:
        """Stop the process (SIGTERM, or SIGKILL for a crash) and start a new one on the same port."""
        if crash:
            self.process.kill()
        else:
            self.process.stop()
        self.process = self._spawn()


@pytest.fixture
def replicas(tmp_path: Path, database_url: str) -> Iterator[list[Replica]]:
    receiver = spawn_receiver(tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}")
    started: list[Replica] = []
    try:
        started += [Replica(tmp_path, database_url, receiver, f"orchestrator-{n}") for n in (1, 2)]
        yield started
    finally:
        for replica in started:
            replica.process.kill()
        receiver.stop()


def _approve_async(target: str, ops: list[str], answered: Callable[[], None]) -> list[ApproveResult]:
    async def stream() -> list[ApproveResult]:
        async with open_aio_channel(target) as channel:
            client = AsyncReviewClient(channel, timeout=10.0, policy=WITHIN_DEADLINE)
            results = []
            for op in ops:
                results.append(await client.approve(op))
                answered()
            return results

    return asyncio.run(stream())


def test_a_stream_of_approvals_over_two_replicas_survives_restarting_each(
    tmp_path: Path, replicas: list[Replica], database_url: str
) -> None:
    target = ",".join(replica.target for replica in replicas)
    channel = open_channel(target)
    try:
        stub = review_pb2_grpc.ReviewServiceStub(channel)
        ops = [
            stub.StartReview(start_request(case_id=f"T-{n}"), timeout=30).proposal.operation_id
            for n in range(OPERATIONS)
        ]
        client = ReviewClient(channel, timeout=10.0, policy=WITHIN_DEADLINE)
        done = [0]
        lock = threading.Lock()

        def answered() -> None:
            with lock:
                done[0] += 1

        def approve(op: str) -> ApproveResult:
            result = client.approve(op)
            answered()
            return result

        def wait_for(answers: int) -> None:
            deadline = time.monotonic() + 120
            while done[0] < answers:
                assert time.monotonic() < deadline, f"{done[0]} answers, waiting for {answers}"
                time.sleep(0.02)

        with ThreadPoolExecutor(4) as pool:
            # Half through three threads of the synchronous client, half through one asyncio client.
            sync_results = [pool.submit(approve, op) for op in ops[0::2]]
            async_results = pool.submit(_approve_async, target, ops[1::2], answered)
            wait_for(OPERATIONS // 6)
            replicas[0].restart(crash=False)
            wait_for(OPERATIONS // 2)
            replicas[1].restart(crash=True)
            results = [future.result() for future in sync_results] + async_results.result()
    finally:
        channel.close()

    # Every call was answered; an approval cut by the crash may be Unknown (an answer: the effect's fate
    # is open, never a failure), and the same Approve repeated later settles it.
    assert len(results) == OPERATIONS
    assert {result.outcome for result in results} <= {Outcome.COMMITTED, Outcome.UNKNOWN}
    assert count(f"sqlite:///{tmp_path / 'receiver.db'}", "SELECT count(DISTINCT case_id) FROM effects") == count(
        f"sqlite:///{tmp_path / 'receiver.db'}", "SELECT count(*) FROM effects"
    )
    assert count(database_url, "SELECT count(*) FROM decisions") == OPERATIONS

    # The CLI takes the same list, and a repeated approval is answered through it (a replay).
    command = [sys.executable, "-m", "decisionflow_server.apps.cli", "approve", ops[0], "--json", "--target", target]
    approved = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["replay"] is True
