"""An effect writer's payload carries text the receiver stores in its business record: values the
database cannot hold are refused with INVALID_ARGUMENT on SQLite and on PostgreSQL alike, never
answered UNKNOWN by a failed commit, and nothing is written."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import grpc
import pytest

from decisionflow.status_details import error_info
from decisionflow.v1 import effect_receiver_pb2, effect_receiver_pb2_grpc
from decisionflow_server.foundation.strict_json import MAX_DEPTH
from effect_receiver.config import ReceiverConfig
from effect_receiver.main import create_server as create_receiver
from tests.security.contract import apply_request
from tests.security.dbstate import snapshot
from tests.support.payloads import tampered
from tests.support.servers import LoopThread

HOSTILE_PAYLOADS = {
    "NUL in body": {"body": "a\x00b"},
    "unpaired surrogate in body": {"body": "\ud800"},
    "NUL in reviewer": {"reviewer": "ri\x00ta"},
    "reviewer longer than the record holds": {"reviewer": "r" * 257},
    "decided_at past year 9999 in UTC": {"decided_at": "9999-12-31T23:59:59-05:00"},
    "decided_at before year 1 in UTC": {"decided_at": "0001-01-01T00:00:00+05:00"},
}


@pytest.fixture
def receiver(database_url: str) -> Iterator[tuple[effect_receiver_pb2_grpc.EffectReceiverServiceStub, str]]:
    """A receiver on each kind of database, and a stub to it."""
    loop = LoopThread()
    server = loop.run(create_receiver(ReceiverConfig(address="127.0.0.1:0", database_url=database_url)))
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel), database_url
    finally:
        channel.close()
        loop.run(server.stop(1.0))
        loop.close()


def _apply(changes: dict[str, str]) -> effect_receiver_pb2.ApplyRequest:
    request = apply_request()
    assert isinstance(request, effect_receiver_pb2.ApplyRequest)
    payload = tampered(request.payload, **changes)
    request.payload, request.payload_digest = payload, hashlib.sha256(payload).hexdigest()
    return request


def test_payload_text_the_record_cannot_hold_is_refused(
    receiver: tuple[effect_receiver_pb2_grpc.EffectReceiverServiceStub, str],
) -> None:
    stub, database_url = receiver
    before = snapshot(database_url)
    for what, changes in HOSTILE_PAYLOADS.items():
        with pytest.raises(grpc.RpcError) as refused:
            stub.Apply(_apply(changes), timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (what, refused.value.details())
    assert snapshot(database_url) == before
    # SQL metacharacters are text like any other, and the receiver still writes.
    answer = stub.Apply(_apply({"body": "'); DROP TABLE effects; --", "reviewer": "o'brien"}), timeout=10)
    assert answer.result == effect_receiver_pb2.APPLY_RESULT_CREATED
    listed = stub.ListEffects(effect_receiver_pb2.ListEffectsRequest(case_id="T-7001"), timeout=10)
    assert [(e.body, e.reviewer) for e in listed.effects] == [("'); DROP TABLE effects; --", "o'brien")]


def _nested(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _with_payload(payload: bytes) -> effect_receiver_pb2.ApplyRequest:
    request = apply_request()
    assert isinstance(request, effect_receiver_pb2.ApplyRequest)
    request.payload, request.payload_digest = payload, hashlib.sha256(payload).hexdigest()
    return request


def test_deeply_nested_payload_is_a_field_violation_and_writes_nothing(
    receiver: tuple[effect_receiver_pb2_grpc.EffectReceiverServiceStub, str],
) -> None:
    stub, database_url = receiver
    before = snapshot(database_url)
    template = apply_request()
    assert isinstance(template, effect_receiver_pb2.ApplyRequest)
    valid = template.payload
    hostile = {
        "100000 open brackets": b"[" * 100_000,
        "50000 nested objects": b'{"a":' * 50_000,
        # Valid JSON with every required field, one level past the bound in an ignored key.
        "ignored key nested one level too deep": tampered(valid, extra=_nested(MAX_DEPTH)),
    }
    for what, payload in hostile.items():
        with pytest.raises(grpc.RpcError) as refused:
            stub.Apply(_with_payload(payload), timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (what, refused.value.details())
        violations = error_info(refused.value)[2]
        assert [v.field for v in violations] == ["payload"], what
        assert "nested too deeply" in violations[0].description, what
    assert snapshot(database_url) == before
    # At the bound (the payload object plus MAX_DEPTH - 1 levels) the payload is still accepted.
    answer = stub.Apply(_with_payload(tampered(valid, extra=_nested(MAX_DEPTH - 1))), timeout=10)
    assert answer.result == effect_receiver_pb2.APPLY_RESULT_CREATED
