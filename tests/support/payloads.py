"""Apply payloads for tests: built through decisionflow_server.foundation.payload, plus a tamper step
for refusal cases."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from decisionflow.v1 import effect_receiver_pb2
from decisionflow.vocabulary import CaseId, EffectRequest, OperationId
from decisionflow.vocabulary_wire import effect_request_to_pb
from decisionflow_server.foundation.payload import APPROVE, EffectPayload

CASE_ID = CaseId("T-1042")
ACTION = "record_support_review"
BODY = "Thanks for the report. This is a known firmware issue; version 4.2.1 fixes it.\n"
DECIDED_AT = datetime(2026, 11, 29, 20, 53, 0, 123456, tzinfo=UTC)


def new_operation_id() -> OperationId:
    """A fresh, well-formed operation id (random: each test gets its own keys)."""
    return OperationId("op-v1-" + hashlib.sha256(uuid.uuid4().bytes).hexdigest())


def sample_payload(operation_id: str, case_id: str = CASE_ID, /, **changes: Any) -> EffectPayload:
    """A valid payload for operation_id, as the orchestrator would build it; changes replace fields."""
    payload = EffectPayload(
        operation_id=operation_id,
        case_id=case_id,
        action=ACTION,
        body=BODY,
        evidence_id="ev-v1-" + "1" * 64,
        policy_id="pol-v1-" + "2" * 64,
        reviewer="rita@example.com",
        decision=APPROVE,
        decided_at=DECIDED_AT,
    )
    return dataclasses.replace(payload, **changes)


def tampered(payload: bytes, **fields: Any) -> bytes:
    """payload with fields replaced by any JSON values (also ill-typed ones), keys still sorted.

    ensure_ascii keeps an unpaired surrogate as a \\ud800 escape: valid JSON, invalid text.
    """
    document = json.loads(payload)
    document.update(fields)
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _fits(name: str, value: Any) -> bool:
    return isinstance(value, datetime) if name == "decided_at" else isinstance(value, str)


def payload_for(operation_id: str, case_id: str = CASE_ID, /, **overrides: Any) -> bytes:
    """The canonical payload bytes for operation_id; overrides of the wrong type are written as given."""
    typed = {name: value for name, value in overrides.items() if _fits(name, value)}
    encoded = sample_payload(operation_id, case_id, **typed).encode()
    untyped = {name: value for name, value in overrides.items() if name not in typed}
    return tampered(encoded, **untyped) if untyped else encoded


def effect_request(
    operation_id: str,
    case_id: str = CASE_ID,
    payload: bytes | None = None,
    digest: str | None = None,
    *,
    kind: str = ACTION,
) -> EffectRequest:
    """An Apply of operation_id whose digest matches its payload unless digest is given (fields unchecked)."""
    if payload is None:
        payload = payload_for(operation_id, case_id)
    digest = hashlib.sha256(payload).hexdigest() if digest is None else digest
    return EffectRequest(OperationId(operation_id), CaseId(case_id), kind, payload, digest)


def apply_request(
    operation_id: str, case_id: str = CASE_ID, payload: bytes | None = None, digest: str | None = None
) -> effect_receiver_pb2.ApplyRequest:
    """An ApplyRequest whose digest matches its payload unless digest is given."""
    return effect_request_to_pb(effect_request(operation_id, case_id, payload, digest))
