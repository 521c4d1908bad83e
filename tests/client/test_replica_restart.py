"""Clients given several orchestrator addresses ride out a replica's restart. Two orchestrator
processes on two ports share one database; the synchronous and the asyncio client (and the CLI) are
given both ports as one target, `127.0.0.1:P1,127.0.0.1:P2`, and a stream of proposals and approvals
runs, unbroken, while one replica is stopped and started again, then the other is killed (SIGKILL)
and started again. The other replica answers while each one is down, and every call that retries within
its deadline gets an answer: none fails, and each case has one effect. A graceful stop may answer
CANCELLED for a call no handler had taken yet (grpc/grpc#41785); the stream sends such a call again
with the same content, as docs/clients.md tells callers to, and counts it."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from decisionflow.channels import open_aio_channel, open_channel
from decisionflow.client import AsyncReviewClient, ReviewClient, ServerError
from decisionflow.client.views import ApproveResult
from decisionflow.identity import EvidenceItem, PolicyRef
from decisionflow.retry import CLIENT_DEFAULT
from decisionflow.vocabulary import Outcome
from decisionflow_demo.launch import CHECKPOINT_KEYS_ENV, ORCHESTRATOR_MODULE, orchestrator_args
from decisionflow_server.foundation.processes import ServiceProcess, free_port, spawn
from tests.support.stack import CHECKPOINT_KEY, T1042_BODY, count, spawn_receiver

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

# Answers between the steps: before the first restart, and after each.
ANSWERS_PER_STEP = 8
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

    def down(self, *, crash: bool) -> None:
        """Stop the process: SIGTERM, or SIGKILL for a crash."""
        if crash:
            self.process.kill()
        else:
            self.process.stop()

    def up(self) -> None:
        """Start a new process on the same port."""
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


EVIDENCE = (EvidenceItem("HOLD-7", 2, "Firmware 4.2.0 may hold."), EvidenceItem("KB-12", 1, "Update to 4.2.1."))
POLICY = PolicyRef("support-replies", "2026-10", 9)


class Stream:
    """Cases started and approved one after another by several callers until told to stop; what each
    approval answered, and how many were answered so far."""

    def __init__(self) -> None:
        self._cases = itertools.count()
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.answers: list[ApproveResult] = []
        self.cancelled_at_stop = 0

    def next_case(self) -> str | None:
        with self._lock:
            return None if self.stop.is_set() else f"T-{next(self._cases)}"

    def answered(self, result: ApproveResult) -> None:
        with self._lock:
            self.answers.append(result)

    def count(self) -> int:
        with self._lock:
            return len(self.answers)

    def wait_for(self, answers: int) -> None:
        deadline = time.monotonic() + 120
        while self.count() < answers:
            assert time.monotonic() < deadline, f"{self.count()} answers, waiting for {answers}"
            time.sleep(0.02)

    def cancelled_by_a_stop(self, error: ServerError) -> bool:
        """Whether error is a CANCELLED a replica's graceful stop answered (counted); gRPC cancels a call that
        had reached the server but no handler yet when the server stops (grpc/grpc#41785). Nothing of it ran,
        and every call here may be sent again with the same content."""
        if error.code is not grpc.StatusCode.CANCELLED:
            return False
        with self._lock:
            self.cancelled_at_stop += 1
        return True

    def run(self, client: ReviewClient) -> None:
        while (case_id := self.next_case()) is not None:
            while True:
                try:
                    started = client.start_review(case_id, "record_support_review", T1042_BODY, EVIDENCE, POLICY)
                    self.answered(client.approve(started.proposal.operation_id))
                    break
                except ServerError as error:
                    if not self.cancelled_by_a_stop(error):
                        raise

    def run_async(self, target: str) -> None:
        async def stream() -> None:
            async with open_aio_channel(target) as channel:
                client = AsyncReviewClient(channel, timeout=10.0, policy=WITHIN_DEADLINE)
                while (case_id := self.next_case()) is not None:
                    while True:
                        try:
                            started = await client.start_review(
                                case_id, "record_support_review", T1042_BODY, EVIDENCE, POLICY
                            )
                            self.answered(await client.approve(started.proposal.operation_id))
                            break
                        except ServerError as error:
                            if not self.cancelled_by_a_stop(error):
                                raise

        asyncio.run(stream())


def test_a_stream_of_approvals_over_two_replicas_survives_restarting_each(
    tmp_path: Path, replicas: list[Replica], database_url: str
) -> None:
    target = ",".join(replica.target for replica in replicas)
    stream = Stream()
    answered_during: list[int] = []
    with open_channel(target) as channel, ThreadPoolExecutor(4) as pool:
        client = ReviewClient(channel, timeout=10.0, policy=WITHIN_DEADLINE)
        # Three threads of the synchronous client and one asyncio client, on the one list of both replicas.
        callers = [pool.submit(stream.run, client) for _ in range(3)] + [pool.submit(stream.run_async, target)]
        try:
            for replica, crash in ((replicas[0], False), (replicas[1], True)):
                stream.wait_for(stream.count() + ANSWERS_PER_STEP)
                replica.down(crash=crash)
                # The other replica answers while this one is down.
                before = stream.count()
                stream.wait_for(before + ANSWERS_PER_STEP)
                answered_during.append(stream.count() - before)
                replica.up()
            stream.wait_for(stream.count() + ANSWERS_PER_STEP)
        finally:
            stream.stop.set()
        for caller in callers:
            caller.result()  # a call that failed within its deadline raises here

    # The other replica answered while each one was down; only the graceful stop may have cancelled a call.
    assert all(answers >= ANSWERS_PER_STEP for answers in answered_during), answered_during
    cancelled = stream.cancelled_at_stop
    print(f"answered while down: {answered_during}; cancelled at the graceful stop and sent again: {cancelled}")
    # An approval cut by the crash may be Unknown (an answer: the effect's fate is open, never a failure).
    assert {result.outcome for result in stream.answers} <= {Outcome.COMMITTED, Outcome.UNKNOWN}
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    effects = count(receiver_url, "SELECT count(*) FROM effects")
    assert effects == count(receiver_url, "SELECT count(DISTINCT case_id) FROM effects")
    assert count(database_url, "SELECT count(*) FROM decisions") == len(stream.answers)

    # The CLI takes the same list, and a repeated approval is answered through it (a replay).
    op = stream.answers[0].operation.operation_id
    command = [sys.executable, "-m", "decisionflow_cli", "approve", op, "--json", "--target", target]
    approved = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["replay"] is True
