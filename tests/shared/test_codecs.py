"""The shared codecs: the Apply payload's canonical bytes and strict decoding, and strict JSON."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta, timezone

import pytest

from decisionflow.vocabulary import Decision
from decisionflow_server.foundation import strict_json
from decisionflow_server.foundation.payload import APPROVE, EffectPayload, PayloadError
from orchestrator.domain import RecordedDecision, effect_payload
from tests.support.payloads import sample_payload, tampered
from tests.support.seeding import proposal_for

OP = "op-v1-" + "a" * 64
# The bytes the orchestrator has always sent for these fields: a re-drive must send them unchanged.
GOLDEN = (
    '{"action":"record_support_review","body":"Réponse: mise à jour 4.2.1","case_id":"T-1042",'
    '"decided_at":"2026-11-29T20:53:00.000000+01:00","decision":"approve","evidence_id":"ev-v1-e",'
    '"operation_id":"' + OP + '","policy_id":"pol-v1-p","reviewer":"rita@example.com"}'
).encode()


def golden_payload() -> EffectPayload:
    return EffectPayload(
        operation_id=OP,
        case_id="T-1042",
        action="record_support_review",
        body="Réponse: mise à jour 4.2.1",
        evidence_id="ev-v1-e",
        policy_id="pol-v1-p",
        reviewer="rita@example.com",
        decision=APPROVE,
        decided_at=datetime(2026, 11, 29, 20, 53, tzinfo=timezone(timedelta(hours=1))),
    )


def test_encode_gives_the_canonical_bytes_and_decode_reads_them_back() -> None:
    payload = golden_payload()
    assert payload.encode() == GOLDEN
    assert payload.digest() == hashlib.sha256(GOLDEN).hexdigest()
    assert EffectPayload.decode(GOLDEN) == payload


def test_the_orchestrator_builds_its_payload_with_the_shared_type() -> None:
    decided_at = datetime(2026, 11, 29, 20, 53, tzinfo=UTC)
    proposal = proposal_for("T-1042", "A reply.", decided_at)
    payload, digest = effect_payload(
        proposal, RecordedDecision(proposal.operation_id, Decision.APPROVE, "r", decided_at)
    )
    decoded = EffectPayload.decode(payload)
    assert (decoded.operation_id, decoded.decision, decoded.reviewer) == (proposal.operation_id, "approve", "r")
    assert (decoded.encode(), decoded.digest()) == (payload, digest)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (tampered(sample_payload(OP).encode(), decision="APPROVE"), "payload.decision"),
        (tampered(sample_payload(OP).encode(), reviewer=7), "payload.reviewer"),
        (tampered(sample_payload(OP).encode(), decided_at="2026-11-29T20:53:00"), "payload.decided_at"),
        (b'{"a": NaN}', "payload"),
        (b'{"a": 1, "a": 2}', "payload"),
        (b"[1]", "payload"),
        (b"\xff", "payload"),
    ],
)
def test_decode_refuses_what_the_orchestrator_never_writes(payload: bytes, field: str) -> None:
    with pytest.raises(PayloadError) as refused:
        EffectPayload.decode(payload)
    assert field in {problem.field for problem in refused.value.problems}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1, "a": 2}', "duplicate JSON key 'a'"),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ("[" * 100_000, "nested too deeply"),
        ("{", "Expecting property name"),
    ],
)
def test_strict_json_refuses_what_plain_json_loads_would_guess_at(text: str, message: str) -> None:
    with pytest.raises(strict_json.StrictJSONError, match=message):
        strict_json.loads(text)
    assert strict_json.loads_object('{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}
    with pytest.raises(strict_json.StrictJSONError, match="top level"):
        strict_json.loads_object("[]")
