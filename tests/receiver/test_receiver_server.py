"""The receiver through a real gRPC server on a free port and a real stub."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from decisionflow import reasons
from decisionflow.status_details import error_info
from decisionflow.timestamps import from_timestamp
from decisionflow.v1 import common_pb2, effect_receiver_pb2
from decisionflow_server.foundation.exposure import ExposureRefused
from effect_receiver.domain import MAX_PAYLOAD_BYTES
from effect_receiver.grpc_api import SERVICE_NAME
from tests.support.receiver import (
    CASE_ID,
    InProcessReceiver,
    StartReceiver,
    apply_request,
    count_rows,
    new_operation_id,
    payload_for,
)

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

CREATED = effect_receiver_pb2.APPLY_RESULT_CREATED
REPLAYED = effect_receiver_pb2.APPLY_RESULT_REPLAYED


def refusal(call: pytest.ExceptionInfo[grpc.RpcError]) -> tuple[grpc.StatusCode, str, dict[str, str], set[str]]:
    reason, metadata, violations = error_info(call.value)
    return call.value.code(), reason, metadata, {v.field for v in violations}


def lookup(receiver: InProcessReceiver, operation_id: str) -> effect_receiver_pb2.LookupResult:
    response = receiver.stub.Lookup(effect_receiver_pb2.LookupRequest(operation_id=operation_id), timeout=5)
    return response.result


def test_created_then_replayed_with_the_same_receipt(start_receiver: StartReceiver, database_url: str) -> None:
    receiver = start_receiver(database_url=database_url)
    operation_id = new_operation_id()
    first = receiver.stub.Apply(apply_request(operation_id), timeout=5)
    second = receiver.stub.Apply(apply_request(operation_id), timeout=5)
    assert (first.result, second.result) == (CREATED, REPLAYED)
    assert second.receipt == first.receipt
    assert first.receipt.operation_id == operation_id
    assert first.receipt.receipt_id.startswith("rcpt-") and len(first.receipt.receipt_id) == 37
    assert first.receipt.applied_at.seconds > 0
    assert not first.HasField("key_retention")  # no retention configured: keys are kept forever
    listed = receiver.stub.ListEffects(effect_receiver_pb2.ListEffectsRequest(case_id=CASE_ID), timeout=5)
    assert [(e.operation_id, e.receipt) for e in listed.effects] == [(operation_id, first.receipt)]
    assert listed.effects[0].reviewer == "rita@example.com"
    assert listed.effects[0].payload_digest == hashlib.sha256(payload_for(operation_id)).hexdigest()
    assert count_rows(database_url) == (1, 1)


def test_a_reused_key_is_refused_and_the_stored_effect_kept(start_receiver: StartReceiver) -> None:
    receiver = start_receiver()
    operation_id = new_operation_id()
    original = receiver.stub.Apply(apply_request(operation_id), timeout=5)
    other = payload_for(operation_id, body="A different reply.")
    with pytest.raises(grpc.RpcError) as refused:
        receiver.stub.Apply(apply_request(operation_id, payload=other), timeout=5)
    assert refusal(refused) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        reasons.IDEMPOTENCY_KEY_REUSED,
        {reasons.OPERATION_ID: operation_id},
        set(),
    )
    assert lookup(receiver, operation_id).receipt == original.receipt
    listed = receiver.stub.ListEffects(effect_receiver_pb2.ListEffectsRequest(case_id=CASE_ID), timeout=5)
    assert [e.payload_digest for e in listed.effects] == [hashlib.sha256(payload_for(operation_id)).hexdigest()]
    assert receiver.stub.Apply(apply_request(operation_id), timeout=5).result == REPLAYED


def test_thirty_two_threads_applying_one_key_create_it_once(start_receiver: StartReceiver, database_url: str) -> None:
    receiver = start_receiver(database_url=database_url)
    operation_id = new_operation_id()
    request = apply_request(operation_id)
    barrier = threading.Barrier(32)

    def apply(_: int) -> effect_receiver_pb2.ApplyResponse:
        barrier.wait()
        response: effect_receiver_pb2.ApplyResponse = receiver.stub.Apply(request, timeout=30)
        return response

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        responses = list(pool.map(apply, range(32)))
    assert sorted(r.result for r in responses) == [CREATED] + [REPLAYED] * 31
    assert len({r.receipt.SerializeToString() for r in responses}) == 1
    assert count_rows(database_url) == (1, 1)


def test_lookup_before_and_after(start_receiver: StartReceiver) -> None:
    receiver = start_receiver()
    operation_id = new_operation_id()
    before = lookup(receiver, operation_id)
    assert (before.operation_id, before.status, before.consistency) == (
        operation_id,
        common_pb2.LOOKUP_STATUS_NOT_FOUND,
        common_pb2.CONSISTENCY_STRONG,
    )
    assert not before.HasField("receipt")
    applied = receiver.stub.Apply(apply_request(operation_id), timeout=5)
    asked = time.time()
    after = lookup(receiver, operation_id)
    answered = time.time()
    assert (after.status, after.receipt, after.consistency) == (
        common_pb2.LOOKUP_STATUS_APPLIED,
        applied.receipt,
        common_pb2.CONSISTENCY_STRONG,
    )
    # Observed while the lookup was under way (to the microsecond the timestamp keeps).
    assert asked - 1e-6 <= from_timestamp(after.observed_at).timestamp() <= answered + 1e-6
    with pytest.raises(grpc.RpcError) as refused:
        lookup(receiver, "op-v1-short")
    assert refusal(refused)[0::3] == (grpc.StatusCode.INVALID_ARGUMENT, {"operation_id"})


def test_batch_lookup_of_a_thousand_ids_in_request_order(start_receiver: StartReceiver, database_url: str) -> None:
    receiver = start_receiver(database_url=database_url)
    applied: dict[str, common_pb2.Receipt] = {}
    for _ in range(40):
        operation_id = new_operation_id()
        applied[operation_id] = receiver.stub.Apply(apply_request(operation_id), timeout=5).receipt
    asked = [new_operation_id() for _ in range(960)] + list(applied)
    random.Random(7).shuffle(asked)
    response = receiver.stub.BatchLookup(effect_receiver_pb2.BatchLookupRequest(operation_ids=asked), timeout=10)
    assert [r.operation_id for r in response.results] == asked
    for result in response.results:
        if result.operation_id in applied:
            assert (result.status, result.receipt) == (common_pb2.LOOKUP_STATUS_APPLIED, applied[result.operation_id])
        else:
            assert result.status == common_pb2.LOOKUP_STATUS_NOT_FOUND and not result.HasField("receipt")
        assert result.consistency == common_pb2.CONSISTENCY_STRONG
    for ids, field in (
        ([], "operation_ids"),
        (asked + asked[:1], "operation_ids"),
        ([asked[0], "x"], "operation_ids[1]"),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            receiver.stub.BatchLookup(effect_receiver_pb2.BatchLookupRequest(operation_ids=ids), timeout=10)
        assert refusal(refused)[0::3] == (grpc.StatusCode.INVALID_ARGUMENT, {field})


def _oversize(operation_id: str) -> effect_receiver_pb2.ApplyRequest:
    payload = payload_for(operation_id, body="x" * MAX_PAYLOAD_BYTES)
    assert MAX_PAYLOAD_BYTES < len(payload) < 1024 * 1024 - 4096  # refused by the rule, not by the message limit
    return apply_request(operation_id, payload=payload)


INVALID_APPLIES = [
    pytest.param(lambda op: apply_request("op-v1-" + "Z" * 64), {"operation_id"}, id="bad operation id"),
    pytest.param(lambda op: apply_request(op, digest="0" * 64), {"payload_digest"}, id="digest of other bytes"),
    pytest.param(_oversize, {"payload"}, id="oversize payload"),
    pytest.param(
        lambda op: apply_request(op, payload=b'{"operation_id": "%s"}' % op.encode()),
        {f"payload.{key}" for key in ("case_id", "action", "body", "evidence_id", "policy_id", "reviewer")}
        | {"payload.decision", "payload.decided_at"},
        id="missing fields",
    ),
    pytest.param(
        lambda op: effect_receiver_pb2.ApplyRequest(operation_id=op),
        {"case_id", "kind", "payload_digest", "payload"},
        id="empty request",
    ),
]


@pytest.mark.parametrize(("make_request", "fields"), INVALID_APPLIES)
def test_an_invalid_apply_is_refused_with_field_violations_and_nothing_written(
    start_receiver: StartReceiver,
    tmp_path: Path,
    make_request: Callable[[str], effect_receiver_pb2.ApplyRequest],
    fields: set[str],
) -> None:
    receiver = start_receiver()
    operation_id = new_operation_id()
    with pytest.raises(grpc.RpcError) as refused:
        receiver.stub.Apply(make_request(operation_id), timeout=5)
    code, reason, _, violated = refusal(refused)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, reasons.INVALID_ARGUMENT)
    assert violated == fields
    assert count_rows(receiver.config.database_url) == (0, 0)
    assert lookup(receiver, operation_id).status == common_pb2.LOOKUP_STATUS_NOT_FOUND


def test_list_effects_pages_and_refuses_a_forged_token(start_receiver: StartReceiver) -> None:
    receiver = start_receiver()
    ours = [new_operation_id() for _ in range(3)]
    for operation_id in ours:
        receiver.stub.Apply(apply_request(operation_id), timeout=5)
    first = receiver.stub.ListEffects(effect_receiver_pb2.ListEffectsRequest(case_id=CASE_ID, page_size=2), timeout=5)
    second = receiver.stub.ListEffects(
        effect_receiver_pb2.ListEffectsRequest(case_id=CASE_ID, page_size=2, page_token=first.next_page_token),
        timeout=5,
    )
    assert [e.operation_id for e in (*first.effects, *second.effects)] == ours
    assert first.next_page_token and not second.next_page_token
    for request, field in (
        (effect_receiver_pb2.ListEffectsRequest(case_id=CASE_ID, page_token="forged"), "page_token"),
        (effect_receiver_pb2.ListEffectsRequest(case_id=CASE_ID, page_size=1001), "page_size"),
        (effect_receiver_pb2.ListEffectsRequest(case_id="no spaces"), "case_id"),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            receiver.stub.ListEffects(request, timeout=5)
        assert refusal(refused)[0::3] == (grpc.StatusCode.INVALID_ARGUMENT, {field})


def test_a_lost_reply_is_unavailable_yet_the_effect_is_applied(start_receiver: StartReceiver) -> None:
    receiver = start_receiver(failpoints="receiver.commit_then_lose_reply=raise@1")
    operation_id = new_operation_id()
    with pytest.raises(grpc.RpcError) as lost:
        receiver.stub.Apply(apply_request(operation_id), timeout=5)
    assert refusal(lost)[:3] == (
        grpc.StatusCode.UNAVAILABLE,
        reasons.REPLY_LOST,
        {reasons.OPERATION_ID: operation_id},
    )
    found = lookup(receiver, operation_id)
    assert (found.status, found.consistency) == (common_pb2.LOOKUP_STATUS_APPLIED, common_pb2.CONSISTENCY_STRONG)
    retried = receiver.stub.Apply(apply_request(operation_id), timeout=5)  # @1: only the first hit fires
    assert (retried.result, retried.receipt) == (REPLAYED, found.receipt)
    assert count_rows(receiver.config.database_url) == (1, 1)


def test_lookups_from_a_replica_are_eventual(start_receiver: StartReceiver, tmp_path: Path) -> None:
    # A replica that lags behind: an empty copy of the schema, never written by this receiver.
    stale = start_receiver(database_url=f"sqlite:///{tmp_path / 'replica.db'}")
    stale.stop()
    primary_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    lagging = start_receiver(database_url=primary_url, replica_database_url=stale.config.database_url)
    operation_id = new_operation_id()
    lagging.stub.Apply(apply_request(operation_id), timeout=5)
    found = lookup(lagging, operation_id)
    assert (found.status, found.consistency) == (common_pb2.LOOKUP_STATUS_NOT_FOUND, common_pb2.CONSISTENCY_EVENTUAL)
    # A replica that has caught up (here: the primary's own file) answers APPLIED, still EVENTUAL.
    caught_up = start_receiver(database_url=primary_url, replica_database_url=primary_url)
    found = lookup(caught_up, operation_id)
    assert (found.status, found.consistency) == (common_pb2.LOOKUP_STATUS_APPLIED, common_pb2.CONSISTENCY_EVENTUAL)
    batch = caught_up.stub.BatchLookup(
        effect_receiver_pb2.BatchLookupRequest(operation_ids=[operation_id, new_operation_id()]), timeout=5
    )
    assert [r.consistency for r in batch.results] == [common_pb2.CONSISTENCY_EVENTUAL] * 2


def test_every_response_advertises_the_key_retention(start_receiver: StartReceiver) -> None:
    receiver = start_receiver(key_retention=timedelta(days=30))
    operation_id = new_operation_id()
    stub = receiver.stub
    responses: list[Any] = [
        stub.Apply(apply_request(operation_id), timeout=5),
        stub.Apply(apply_request(operation_id), timeout=5),
        stub.Lookup(effect_receiver_pb2.LookupRequest(operation_id=operation_id), timeout=5),
        stub.BatchLookup(effect_receiver_pb2.BatchLookupRequest(operation_ids=[operation_id]), timeout=5),
        stub.ListEffects(effect_receiver_pb2.ListEffectsRequest(case_id=CASE_ID), timeout=5),
    ]
    assert [r.key_retention.ToTimedelta() for r in responses] == [timedelta(days=30)] * 5


@pytest.mark.postgres
def test_a_database_that_goes_away_makes_calls_unavailable(start_receiver: StartReceiver, postgres_url: str) -> None:
    receiver = start_receiver(database_url=postgres_url)
    operation_id = new_operation_id()
    receiver.stub.Apply(apply_request(operation_id), timeout=5)
    # Dropped from the server's maintenance database (the one the postgres_url fixture used).
    name = postgres_url.rsplit("/", 1)[1]
    base = os.environ.get("DECISIONFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    for call in (
        lambda: receiver.stub.Apply(apply_request(new_operation_id()), timeout=10),
        lambda: lookup(receiver, operation_id),
    ):
        with pytest.raises(grpc.RpcError) as down:
            call()
        assert refusal(down)[:2] == (grpc.StatusCode.UNAVAILABLE, reasons.UNAVAILABLE)


def test_health_then_graceful_shutdown_drains_the_call_in_flight(start_receiver: StartReceiver, tmp_path: Path) -> None:
    receiver = start_receiver()
    health = health_pb2_grpc.HealthStub(receiver.channel)
    for service in ("", SERVICE_NAME):
        status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=20)
    assert next(watch).status == health_pb2.HealthCheckResponse.SERVING

    # Hold SQLite's write lock so that an Apply is still in flight when shutdown begins.
    blocker = sqlite3.connect(tmp_path / "receiver.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    operation_id = new_operation_id()
    in_flight = receiver.stub.Apply.future(apply_request(operation_id), timeout=20)
    time.sleep(1.0)  # long enough for the call to reach the server and wait on the lock
    stopping = threading.Thread(target=receiver.stop, kwargs={"grace": 10.0})
    stopping.start()
    assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
    watch.cancel()  # an open stream would otherwise hold the drain for the whole grace period
    blocker.execute("COMMIT")
    blocker.close()
    assert in_flight.result().result == CREATED  # drained, not cut off
    stopping.join(5)
    assert not stopping.is_alive()  # done once the last call finished, well before the grace period
    assert count_rows(receiver.config.database_url) == (1, 1)
    with grpc.insecure_channel(f"127.0.0.1:{receiver.port}") as channel, pytest.raises(grpc.RpcError) as gone:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
    assert gone.value.code() == grpc.StatusCode.UNAVAILABLE


def test_listening_beyond_loopback_without_tls_and_auth_is_refused(start_receiver: StartReceiver) -> None:
    with pytest.raises(ExposureRefused):
        start_receiver(address="0.0.0.0:0")
