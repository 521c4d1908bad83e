"""``--workers 2``: real processes. Both workers of each service serve the one port (distinct
process ids in their access lines), health answers through it, and SIGTERM drains every worker
and ends the parent with status 0. Each worker serves on uvloop's event loop (its listening line
names the loop)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from decisionflow.v1 import common_pb2, effect_receiver_pb2, effect_receiver_pb2_grpc, review_pb2_grpc
from decisionflow_demo.launch import (
    CHECKPOINT_KEYS_ENV,
    ORCHESTRATOR_MODULE,
    RECEIVER_MODULE,
    orchestrator_args,
    receiver_args,
)
from decisionflow_server.foundation.processes import ServiceProcess, child_environment, spawn
from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.payloads import apply_request, new_operation_id
from tests.support.stack import CHECKPOINT_KEY, approve, count, start_request

CONNECTIONS = 24  # each a new TCP connection; the kernel picks a worker per connection
# A channel of its own subchannel pool opens a connection of its own: from gRPC's global pool a new channel may
# take up a connection a closed one left, and every call would then reach one worker.
OWN_CONNECTION = [("grpc.enable_retries", 0), ("grpc.use_local_subchannel_pool", 1)]


def _log_lines(process: ServiceProcess) -> list[dict[str, object]]:
    return [json.loads(line) for line in process.log().splitlines() if line.startswith("{")]


def _serving_pids(process: ServiceProcess, rpc_suffix: str) -> set[int]:
    """Process ids of the workers whose access lines show a call of the method."""
    return {
        int(str(line["pid"]))
        for line in _log_lines(process)
        if str(line.get("rpc", "")).endswith(rpc_suffix) and "pid" in line
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _run(tmp_path: Path, orchestrator_url: str, receiver_url: str) -> None:
    workers = ["--workers", "2"]
    receiver = spawn(RECEIVER_MODULE, receiver_args(receiver_url, extra=workers), tmp_path, "receiver")
    try:
        orchestrator = spawn(
            ORCHESTRATOR_MODULE,
            orchestrator_args(orchestrator_url, receiver.target, extra=workers),
            tmp_path,
            "orchestrator",
            env={CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY},
        )
        try:
            orchestrator.wait_serving()
            outcomes = []
            for i in range(CONNECTIONS):
                with grpc.insecure_channel(orchestrator.target, options=OWN_CONNECTION) as channel:
                    review = review_pb2_grpc.ReviewServiceStub(channel)
                    op = review.StartReview(start_request(case_id=f"W-{i}"), timeout=20).proposal.operation_id
                    outcomes.append(review.Approve(approve(op), timeout=20).outcome)
            assert outcomes == [common_pb2.OUTCOME_COMMITTED] * CONNECTIONS
            # The orchestrator's workers hold one connection each to the receiver: its workers are
            # reached through connections of their own.
            for _ in range(CONNECTIONS):
                with grpc.insecure_channel(receiver.target, options=OWN_CONNECTION) as channel:
                    stub = effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel)
                    stub.Lookup(effect_receiver_pb2.LookupRequest(operation_id=op), timeout=20)
            orchestrator_pids = _serving_pids(orchestrator, "/StartReview")
            receiver_pids = _serving_pids(receiver, "/Lookup")
            # Two workers each, none of them the parent (which serves nothing).
            assert len(orchestrator_pids) == 2 and orchestrator.pid not in orchestrator_pids
            assert len(receiver_pids) == 2 and receiver.pid not in receiver_pids
        finally:
            stopped = orchestrator.stop()
        assert stopped == 0
        assert not any(_alive(pid) for pid in orchestrator_pids)
        messages = [line["message"] for line in _log_lines(orchestrator)]
        assert messages.count("stopped") == 2 and messages[-1] == "every worker stopped"
    finally:
        assert receiver.stop() == 0
    assert count(receiver_url, "SELECT count(*) FROM effects") == CONNECTIONS
    assert count(orchestrator_url, "SELECT count(*) FROM decisions") == CONNECTIONS


@pytest.mark.slow
def test_two_workers_per_service_on_sqlite(tmp_path: Path) -> None:
    _run(tmp_path, f"sqlite:///{tmp_path / 'orchestrator.db'}", f"sqlite:///{tmp_path / 'receiver.db'}")


@pytest.mark.slow
@pytest.mark.postgres
def test_two_workers_per_service_on_postgresql(tmp_path: Path) -> None:
    orchestrator_url, receiver_url = create_postgres_database(), create_postgres_database()
    try:
        _run(tmp_path, orchestrator_url, receiver_url)
    finally:
        drop_postgres_database(orchestrator_url)
        drop_postgres_database(receiver_url)


@pytest.mark.slow
def test_every_worker_serves_on_uvloop(tmp_path: Path) -> None:
    receiver = spawn(
        RECEIVER_MODULE,
        receiver_args(f"sqlite:///{tmp_path / 'receiver.db'}", extra=["--workers", "2"]),
        tmp_path,
        "receiver",
    )
    try:
        with grpc.insecure_channel(receiver.target) as channel:
            answer = effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel).Apply(
                apply_request(new_operation_id()), timeout=10
            )
        assert answer.result == effect_receiver_pb2.APPLY_RESULT_CREATED
    finally:
        receiver.stop()
    listening = {
        line["pid"]: str(line["message"])
        for line in _log_lines(receiver)
        if str(line["message"]).startswith("listening on")
    }
    assert len(listening) == 2
    assert all(message.endswith("; event loop: uvloop)") for message in listening.values()), listening


def test_workers_that_cannot_start_end_the_service_with_their_status(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-directory" / "receiver.db"

    def run(workers: int) -> subprocess.CompletedProcess[str]:
        args = receiver_args(f"sqlite:///{missing}", extra=["--workers", str(workers)])
        return subprocess.run(
            [sys.executable, "-m", RECEIVER_MODULE, *args],
            env=child_environment(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    single, forked = run(1), run(2)
    # Each worker reports the setting and exits as a single process would; the parent exits with
    # that status, never announcing a port, once every worker has ended (the run returned).
    assert single.returncode != 0
    assert forked.returncode == single.returncode, forked.stderr
    assert "listening" not in forked.stdout
    lines = [json.loads(line) for line in forked.stderr.splitlines() if line.startswith("{")]
    # Every worker that ended by itself said why, naming the setting; the parent stops the others as soon as
    # one ends, so a worker may be stopped (status -15) before it reached the database.
    reported = {line["pid"] for line in lines if line.get("setting") == "--database-url"}
    ended = [
        re.fullmatch(r"worker process (\d+) exited with status (-?\d+); stopping the others", str(line["message"]))
        for line in lines
    ]
    by_itself = {int(m.group(1)) for m in ended if m and m.group(2) != "-15"}
    assert reported, forked.stderr
    assert by_itself, forked.stderr
    assert by_itself <= reported, forked.stderr
    assert {line.get("worker") for line in lines if line.get("setting")} <= {0, 1}, forked.stderr
