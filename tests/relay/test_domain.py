"""The relay's pure rules: subject tokens, the CloudEvents document, the cursor's rule, the cursor file, and
the default origin kept equal to the orchestrator's."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from decisionflow.client.events import EventView
from decisionflow.vocabulary import Decision, OperationState
from decisionflow_relay import domain
from decisionflow_relay.cursor import CursorFile
from decisionflow_relay.errors import CursorFileError
from orchestrator.audit_log.signing import DEFAULT_ORIGIN

AT = datetime(2026, 12, 7, 23, 0, 1, 250000, tzinfo=UTC)


def event(index: int = 7, **changes: object) -> EventView:
    fields: dict[str, object] = {
        "index": index,
        "leaf": b"\x00leaf bytes\xff",
        "kind": "decision",
        "case_id": "T-1042",
        "operation_id": "op-v1-" + "a" * 64,
        "action": "record_support_review",
        "state": OperationState.APPROVED,
        "principal": "rita",
        "occurred_at": AT,
        "decision": Decision.APPROVE,
    }
    fields.update(changes)
    return EventView(**fields)  # type: ignore[arg-type]


def test_the_default_origin_is_the_orchestrators() -> None:
    assert domain.DEFAULT_ORIGIN == DEFAULT_ORIGIN


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("decisionflow.local/audit", "decisionflow_local/audit"),
        ("a*b>c d\te\nf", "a_b_c_d_e_f"),
        ("record_support_review", "record_support_review"),
        ("", "_"),
        ("bell\x07", "bell_"),
    ],
)
def test_a_subject_token_has_no_separator_wildcard_or_whitespace(text: str, token: str) -> None:
    assert domain.subject_token(text) == token


def test_the_subject_names_prefix_origin_kind_and_action() -> None:
    assert domain.subject("acme.events", "example.org/log one", event(action="send.it")) == (
        "acme.events.example_org/log_one.decision.send_it"
    )


@pytest.mark.parametrize("prefix", ["", ".a", "a.", "a..b", "a.*", "a.>", "a b"])
def test_a_prefix_with_an_empty_token_a_wildcard_or_a_space_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="is not a subject prefix"):
        domain.check_prefix(prefix)


def test_the_cloudevent_carries_the_ids_the_time_and_the_leaf() -> None:
    message = domain.outgoing("decisionflow", "example.org/log", event())
    document = json.loads(message.payload)
    assert message.message_id == "example.org/log/7"
    assert message.subject == "decisionflow.example_org/log.decision.record_support_review"
    assert document == {
        "specversion": "1.0",
        "id": "example.org/log/7",
        "source": "example.org/log",
        "type": "dev.decisionflow.decision",
        "datacontenttype": "application/json",
        "subject": "op-v1-" + "a" * 64,
        "time": "2026-12-07T23:00:01.250000Z",
        "data": {
            "index": 7,
            "leaf": base64.b64encode(b"\x00leaf bytes\xff").decode(),
            "kind": "decision",
            "case_id": "T-1042",
            "operation_id": "op-v1-" + "a" * 64,
            "action": "record_support_review",
            "state": "APPROVED",
            "principal": "rita",
            "occurred_at": "2026-12-07T23:00:01.250000Z",
            "decision": "APPROVE",
        },
    }


def test_an_event_without_a_principal_or_decision_writes_null() -> None:
    data = json.loads(domain.outgoing("p", "o", event(principal="", decision=Decision.UNSPECIFIED)).payload)["data"]
    assert (data["principal"], data["decision"]) == (None, None)


def test_the_cursor_is_the_lowest_index_in_flight_else_the_position() -> None:
    progress = domain.Progress(10)
    assert (progress.cursor, progress.lag_events) == (10, 0)
    for index in (10, 11, 12):
        progress.sent(index, AT + timedelta(seconds=index))
    progress.acknowledged(11)
    progress.acknowledged(12)
    # 10 is not acknowledged: a crash now must send 10 again (and 11, 12: JetStream drops those).
    assert (progress.cursor, progress.lag_events) == (10, 3)
    assert progress.lag_seconds(AT + timedelta(seconds=15)) == 5.0
    progress.acknowledged(10)
    assert (progress.cursor, progress.lag_events, progress.lag_seconds(AT)) == (13, 0, 0.0)
    progress.heard(20)  # a heartbeat: nothing below 20 is left to send
    assert (progress.cursor, progress.position) == (20, 20)


def test_an_event_below_the_position_is_refused() -> None:
    progress = domain.Progress(5)
    with pytest.raises(ValueError, match="below the watch's position"):
        progress.sent(4, AT)


def test_the_cursor_file_round_trips_and_refuses_what_is_not_an_index(tmp_path: Path) -> None:
    cursor = CursorFile(tmp_path / "relay.cursor")
    assert cursor.read() == 0
    cursor.write(42)
    assert cursor.read() == 42
    assert (tmp_path / "relay.cursor").read_text() == "42\n"
    assert not (tmp_path / "relay.cursor.partial").exists()
    cursor.write(41)  # a late write of an older cursor (a worker thread still running at a stop) changes nothing
    assert cursor.read() == 42
    (tmp_path / "relay.cursor").write_text("forty-two\n")
    with pytest.raises(CursorFileError, match="does not hold an index"):
        cursor.read()
    with pytest.raises(CursorFileError, match="does not exist"):
        CursorFile(tmp_path / "missing" / "relay.cursor").open()


def test_a_second_relay_on_one_cursor_file_is_refused_until_the_first_lets_go(tmp_path: Path) -> None:
    first, second = CursorFile(tmp_path / "relay.cursor"), CursorFile(tmp_path / "relay.cursor")
    first.open()
    with pytest.raises(CursorFileError, match="is in use by another relay"):
        second.open()
    first.unlock()
    second.open()
    second.unlock()
