"""Receiver processes: two replicas on one database, a crash right after commit, a clean stop on SIGTERM."""

from __future__ import annotations

import concurrent.futures
import json
import signal
import threading
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from grpc_health.v1 import health_pb2, health_pb2_grpc

from decisionflow.v1 import effect_receiver_pb2, effect_receiver_pb2_grpc
from decisionflow_server.runtime.failpoints import EXIT_STATUS
from decisionflow_server.storage import db
from tests.support.logs import read_log
from tests.support.receiver import ReceiverProcess, apply_request, count_rows, new_operation_id, spawn_receiver

CREATED = effect_receiver_pb2.APPLY_RESULT_CREATED
REPLAYED = effect_receiver_pb2.APPLY_RESULT_REPLAYED

pytestmark = pytest.mark.slow  # every test here starts receiver processes


def spawn_together(tmp_path: Path, database_url: str, count: int) -> list[ReceiverProcess]:
    """Start count receivers at once, so their start-up migrations race as they would in a deploy."""
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(spawn_receiver, tmp_path, database_url, name=f"receiver-{n}") for n in range(count)]
        return [future.result() for future in futures]


@pytest.mark.postgres
def test_two_receiver_processes_on_one_database_write_one_effect(
    tmp_path: Path, postgres_url: str, receiver_processes: list[ReceiverProcess]
) -> None:
    receiver_processes += spawn_together(tmp_path, postgres_url, 2)
    operation_id = new_operation_id()
    request = apply_request(operation_id)
    channels = [grpc.insecure_channel(f"127.0.0.1:{child.port}") for child in receiver_processes]
    stubs = [effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel) for channel in channels]
    barrier = threading.Barrier(16)

    def apply(n: int) -> effect_receiver_pb2.ApplyResponse:
        barrier.wait()
        response: effect_receiver_pb2.ApplyResponse = stubs[n % 2].Apply(request, timeout=30)
        return response

    try:
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            responses = list(pool.map(apply, range(16)))
    finally:
        for channel in channels:
            channel.close()
    assert sorted(r.result for r in responses) == [CREATED] + [REPLAYED] * 15
    assert len({r.receipt.receipt_id for r in responses}) == 1
    assert count_rows(postgres_url) == (1, 1)


def test_a_crash_right_after_commit_keeps_the_effect(
    tmp_path: Path, database_url: str, receiver_processes: list[ReceiverProcess]
) -> None:
    crashing = spawn_receiver(tmp_path, database_url, failpoints="receiver.commit_then_exit=exit", name="crashing")
    receiver_processes.append(crashing)
    operation_id = new_operation_id()
    with grpc.insecure_channel(f"127.0.0.1:{crashing.port}") as channel, pytest.raises(grpc.RpcError) as lost:
        effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel).Apply(apply_request(operation_id), timeout=10)
    assert lost.value.code() == grpc.StatusCode.UNAVAILABLE  # the caller cannot tell whether it happened
    assert crashing.process.wait(10) == EXIT_STATUS
    assert "failpoint receiver.commit_then_exit" in crashing.stderr()

    engine = db.create_engine(database_url, pool_size=1)
    try:
        with engine.connect() as conn:
            stored = conn.execute(
                sa.text("SELECT receipt_id FROM effects WHERE operation_id = :o"), {"o": operation_id}
            ).scalar_one()
    finally:
        engine.dispose()
    assert count_rows(database_url) == (1, 1)

    restarted = spawn_receiver(tmp_path, database_url, name="restarted")
    receiver_processes.append(restarted)
    with grpc.insecure_channel(f"127.0.0.1:{restarted.port}") as channel:
        retried = effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel).Apply(
            apply_request(operation_id), timeout=10
        )
    assert (retried.result, retried.receipt.receipt_id) == (REPLAYED, stored)


def test_sigterm_stops_a_serving_receiver_cleanly(tmp_path: Path, receiver_processes: list[ReceiverProcess]) -> None:
    child = spawn_receiver(tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}")
    receiver_processes.append(child)
    first_line = child.stdout_path.read_text().splitlines()[0]
    listening = json.loads(first_line)
    assert (listening["event"], listening["service"], listening["port"]) == ("listening", "effect_receiver", child.port)
    assert (listening["level"], listening["message"]) == ("info", f"listening on port {child.port}")
    with grpc.insecure_channel(f"127.0.0.1:{child.port}") as channel:
        check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert check.status == health_pb2.HealthCheckResponse.SERVING
    child.process.send_signal(signal.SIGTERM)
    assert child.process.wait(10) == 0
    logged = read_log(child.stderr()).records
    assert [entry["message"] for entry in logged if entry["logger"] == "effect_receiver"][-1] == "stopped"
