"""Apply past the key retention: a key that may have been pruned is refused, never written again
(real server on a free port, SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from decisionflow import reasons
from decisionflow.status_details import error_info
from decisionflow.timestamps import to_timestamp
from decisionflow.v1 import effect_receiver_pb2
from effect_receiver.domain import beyond_retention, retention_margin
from tests.support.receiver import StartReceiver, apply_request, count_rows, new_operation_id, payload_for

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

RETENTION = timedelta(hours=1)
CREATED = effect_receiver_pb2.APPLY_RESULT_CREATED
REPLAYED = effect_receiver_pb2.APPLY_RESULT_REPLAYED


def _attempted(operation_id: str, first_attempted_at: datetime) -> effect_receiver_pb2.ApplyRequest:
    request = apply_request(operation_id)
    request.first_attempted_at.CopyFrom(to_timestamp(first_attempted_at))
    return request


def _stale() -> datetime:
    return datetime.now(UTC) - RETENTION - timedelta(seconds=1)


def test_a_stale_first_attempt_with_the_key_absent_is_refused_and_nothing_is_written(
    start_receiver: StartReceiver, database_url: str
) -> None:
    receiver = start_receiver(database_url=database_url, key_retention=RETENTION)
    operation_id, first = new_operation_id(), _stale()
    with pytest.raises(grpc.RpcError) as refused:
        receiver.stub.Apply(_attempted(operation_id, first), timeout=5)
    reason, metadata, _ = error_info(refused.value)
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert reason == reasons.KEY_RETENTION_EXCEEDED
    assert metadata == {
        reasons.OPERATION_ID: operation_id,
        reasons.FIRST_ATTEMPTED_AT: first.isoformat(),
        reasons.KEY_RETENTION: "3600s",
    }
    assert count_rows(database_url) == (0, 0)


def test_a_stale_first_attempt_with_the_key_present_replays_the_receipt(
    start_receiver: StartReceiver, database_url: str
) -> None:
    receiver = start_receiver(database_url=database_url, key_retention=RETENTION)
    operation_id = new_operation_id()
    created = receiver.stub.Apply(apply_request(operation_id), timeout=5)
    replayed = receiver.stub.Apply(_attempted(operation_id, _stale()), timeout=5)
    assert (created.result, replayed.result) == (CREATED, REPLAYED)
    assert replayed.receipt == created.receipt
    assert count_rows(database_url) == (1, 1)


def test_a_stale_first_attempt_with_the_key_present_and_another_payload_is_still_key_reuse(
    start_receiver: StartReceiver, database_url: str
) -> None:
    receiver = start_receiver(database_url=database_url, key_retention=RETENTION)
    operation_id = new_operation_id()
    receiver.stub.Apply(apply_request(operation_id), timeout=5)
    other = payload_for(operation_id, body="A different reply.")
    request = apply_request(operation_id, payload=other, digest=hashlib.sha256(other).hexdigest())
    request.first_attempted_at.CopyFrom(to_timestamp(_stale()))
    with pytest.raises(grpc.RpcError) as refused:
        receiver.stub.Apply(request, timeout=5)
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(refused.value)[0] == reasons.IDEMPOTENCY_KEY_REUSED


@pytest.mark.parametrize(
    ("retention", "age"),
    [
        pytest.param(None, timedelta(days=400), id="no-retention"),
        pytest.param(RETENTION, timedelta(seconds=5), id="fresh-first-attempt"),
        pytest.param(RETENTION, None, id="no-first-attempt"),
    ],
)
def test_an_apply_the_retention_cannot_touch_is_created(
    start_receiver: StartReceiver, database_url: str, retention: timedelta | None, age: timedelta | None
) -> None:
    receiver = start_receiver(database_url=database_url, key_retention=retention)
    operation_id = new_operation_id()
    request = apply_request(operation_id) if age is None else _attempted(operation_id, datetime.now(UTC) - age)
    assert receiver.stub.Apply(request, timeout=5).result == CREATED
    assert count_rows(database_url) == (1, 1)


def test_a_first_attempt_outside_the_timestamp_range_is_invalid(start_receiver: StartReceiver) -> None:
    receiver = start_receiver(key_retention=RETENTION)
    request = apply_request(new_operation_id())
    request.first_attempted_at.seconds = -62_135_596_801  # before year 1
    with pytest.raises(grpc.RpcError) as refused:
        receiver.stub.Apply(request, timeout=5)
    _, _, violations = error_info(refused.value)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in violations] == ["first_attempted_at"]


def test_the_margin_refuses_early_by_at_most_a_minute_or_half_the_retention() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert retention_margin(timedelta(days=1)) == timedelta(seconds=60)
    assert retention_margin(timedelta(seconds=2)) == timedelta(seconds=1)
    day = timedelta(days=1)
    assert beyond_retention(now - day + timedelta(seconds=59), day, now)
    assert not beyond_retention(now - day + timedelta(seconds=61), day, now)
    assert not beyond_retention(now - 2 * day, None, now)
    assert not beyond_retention(None, day, now)
