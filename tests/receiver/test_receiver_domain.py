"""The rules an Apply must satisfy before anything is written, and the receiver's configuration."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from decisionflow_server.foundation import page_tokens
from decisionflow_server.foundation.errors import InvalidRequest
from effect_receiver.config import load
from effect_receiver.domain import MAX_PAYLOAD_BYTES, Effect, batch_violations, check_effect
from effect_receiver.service import decode_page_token, encode_page_token
from tests.support.receiver import BODY, CASE_ID, effect_request, new_operation_id, payload_for

KIND = "record_support_review"


def check(
    operation_id: str, payload: bytes, *, case_id: str = CASE_ID, kind: str = KIND, digest: str | None = None
) -> Any:
    return check_effect(effect_request(operation_id, case_id, payload, digest, kind=kind))


def refused_fields(result: Any) -> set[str]:
    assert isinstance(result, list), f"expected refusal, got {result!r}"
    return {violation.field for violation in result}


def test_a_well_formed_apply_yields_the_effect_and_its_business_record() -> None:
    operation_id = new_operation_id()
    payload = payload_for(operation_id)
    effect = check(operation_id, payload)
    assert isinstance(effect, Effect)
    assert (effect.operation_id, effect.case_id, effect.kind, effect.payload) == (operation_id, CASE_ID, KIND, payload)
    assert (effect.body, effect.reviewer) == (BODY, "rita@example.com")
    assert effect.decided_at == datetime(2026, 11, 29, 20, 53, 0, 123456, tzinfo=UTC)


MALFORMED = [
    pytest.param(lambda op, p: {"operation_id": "op-v1-ABC"}, "operation_id", id="bad op id"),
    pytest.param(lambda op, p: {"operation_id": op.upper()}, "operation_id", id="uppercase op id"),
    pytest.param(lambda op, p: {"case_id": ""}, "case_id", id="empty case"),
    pytest.param(lambda op, p: {"case_id": "T 1042"}, "case_id", id="space in case"),
    pytest.param(lambda op, p: {"case_id": "x" * 65}, "case_id", id="long case"),
    pytest.param(lambda op, p: {"kind": "send_email"}, "kind", id="unknown kind"),
    pytest.param(lambda op, p: {"digest": "0" * 64}, "payload_digest", id="digest of other bytes"),
    pytest.param(
        lambda op, p: {"digest": hashlib.sha256(p).hexdigest().upper()}, "payload_digest", id="uppercase digest"
    ),
    pytest.param(lambda op, p: {"payload": b"\xff\xfe"}, "payload", id="not utf-8"),
    pytest.param(lambda op, p: {"payload": b"not json"}, "payload", id="not json"),
    pytest.param(lambda op, p: {"payload": b"[1, 2]"}, "payload", id="json array"),
    pytest.param(lambda op, p: {"payload": b'{"a": NaN}'}, "payload", id="NaN"),
    pytest.param(lambda op, p: {"payload": b'{"body": "a", "body": "b"}'}, "payload", id="duplicate key"),
    pytest.param(lambda op, p: {"payload": payload_for(op, reviewer=7)}, "payload.reviewer", id="reviewer not string"),
    pytest.param(lambda op, p: {"payload": payload_for(op, reviewer="")}, "payload.reviewer", id="empty reviewer"),
    pytest.param(
        lambda op, p: {"payload": payload_for(op, operation_id=new_operation_id())},
        "payload.operation_id",
        id="payload op id differs",
    ),
    pytest.param(
        lambda op, p: {"payload": payload_for(op, case_id="T-9")}, "payload.case_id", id="payload case differs"
    ),
    pytest.param(
        lambda op, p: {"payload": payload_for(op, action="refund")}, "payload.action", id="payload action differs"
    ),
    pytest.param(
        lambda op, p: {"payload": payload_for(op, decided_at="2026-11-29T20:53:00")},
        "payload.decided_at",
        id="naive decided_at",
    ),
    pytest.param(
        lambda op, p: {"payload": payload_for(op, decided_at="yesterday")},
        "payload.decided_at",
        id="unparsable decided_at",
    ),
    pytest.param(
        lambda op, p: {"payload": payload_for(op, body="x" * MAX_PAYLOAD_BYTES)}, "payload", id="oversize payload"
    ),
]


@pytest.mark.parametrize(("mutate", "field"), MALFORMED)
def test_a_malformed_apply_is_refused_with_the_offending_field(mutate: Any, field: str) -> None:
    operation_id = new_operation_id()
    payload = payload_for(operation_id)
    arguments: dict[str, Any] = {"operation_id": operation_id, "payload": payload}
    arguments.update(mutate(operation_id, payload))
    # The digest follows the (possibly replaced) payload unless the case replaces the digest itself.
    assert field in refused_fields(check(**arguments))


def test_every_missing_payload_key_is_named() -> None:
    operation_id = new_operation_id()
    payload = b'{"operation_id": "%s", "case_id": "T-1042", "action": "record_support_review"}' % operation_id.encode()
    assert refused_fields(check(operation_id, payload)) == {
        "payload.body",
        "payload.evidence_id",
        "payload.policy_id",
        "payload.reviewer",
        "payload.decision",
        "payload.decided_at",
    }


def test_a_payload_of_exactly_256_kib_is_accepted() -> None:
    operation_id = new_operation_id()
    filler = MAX_PAYLOAD_BYTES - len(payload_for(operation_id, body=""))
    payload = payload_for(operation_id, body="x" * filler)
    assert len(payload) == MAX_PAYLOAD_BYTES
    assert isinstance(check(operation_id, payload), Effect)


def test_batch_lookup_bounds() -> None:
    assert [v.field for v in batch_violations([])] == ["operation_ids"]
    assert [v.field for v in batch_violations([new_operation_id()] * 1001)] == ["operation_ids"]
    assert batch_violations([new_operation_id()] * 1000) == []
    assert [v.field for v in batch_violations([new_operation_id(), "op-v1-x"])] == ["operation_ids[1]"]


def test_page_tokens_round_trip_and_forged_ones_are_refused() -> None:
    assert decode_page_token("") == 0
    assert decode_page_token(encode_page_token(41)) == 41
    forgeries = ("garbage!", "bm9wZQ==", page_tokens.encode("effects", -1), page_tokens.encode("effects", 2**63))
    other_listing = page_tokens.encode("operations", "2026-01-01T00:00:00+00:00", "op-v1-" + "0" * 64)
    for forged in (*forgeries, page_tokens.encode("effects", "41"), page_tokens.encode("effects", True), other_listing):
        with pytest.raises(InvalidRequest) as refused:
            decode_page_token(forged)
        assert refused.value.violations[0].field == "page_token"


def test_config_defaults_environment_and_flags() -> None:
    config = load([], {})
    assert (config.address, config.database_url, config.replica_database_url) == (
        "127.0.0.1:50061",
        "receiver.db",
        None,
    )
    assert (config.key_retention, config.failpoints, config.port_file) == (None, "", None)
    config = load(
        ["--address", "127.0.0.1:0"],
        {
            "DECISIONFLOW_RECEIVER_ADDRESS": "127.0.0.1:7000",
            "DECISIONFLOW_RECEIVER_KEY_RETENTION_SECONDS": "86400",
            "DECISIONFLOW_RECEIVER_FAILPOINTS": "receiver.commit_then_lose_reply=raise@1",
        },
    )
    assert config.address == "127.0.0.1:0"  # the flag wins over the environment
    assert config.key_retention == timedelta(days=1)
    assert config.failpoints == "receiver.commit_then_lose_reply=raise@1"


@pytest.mark.parametrize(
    "argv",
    [
        ["--failpoints", "receiver.no_such_point=raise"],
        ["--key-retention-seconds", "0"],
        ["--shutdown-grace-seconds", "soon"],
        ["--log-level", "chatty"],
    ],
)
def test_bad_configuration_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        load(argv, {})
    assert exited.value.code == 2
    assert "decisionflow-receiver" in capsys.readouterr().err
