"""The one vocabulary: every wire value converts to it and back, stored columns keep their text, and
no module defines a second Decision, state, lookup status, receipt, role, violation, case-id pattern
or Apply signature."""

from __future__ import annotations

import ast
import enum
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from decisionflow import vocabulary_wire as wire
from decisionflow.v1 import common_pb2, effect_receiver_pb2
from decisionflow.vocabulary import (
    ApplyResult,
    CaseId,
    Consistency,
    Decision,
    EffectRequest,
    LookupStatus,
    OperationId,
    OperationState,
    Outcome,
    Receipt,
    Role,
    case_id_violations,
    operation_id_violations,
)
from orchestrator.store import _columns as columns

ROOT = Path(__file__).resolve().parents[2]
OP = OperationId("op-v1-" + "c" * 64)
AT = datetime(2026, 11, 29, 20, 53, 0, 123456, tzinfo=UTC)

# Each shared enum with its proto enum and its conversions in both directions.
CODECS: list[tuple[type[enum.Enum], Any, Callable[[Any], int], Callable[[int], enum.Enum]]] = [
    (Decision, common_pb2.Decision, wire.decision_to_pb, wire.decision_from_pb),
    (OperationState, common_pb2.OperationState, wire.state_to_pb, wire.state_from_pb),
    (Outcome, common_pb2.Outcome, wire.outcome_to_pb, wire.outcome_from_pb),
    (LookupStatus, common_pb2.LookupStatus, wire.lookup_status_to_pb, wire.lookup_status_from_pb),
    (Consistency, common_pb2.Consistency, wire.consistency_to_pb, wire.consistency_from_pb),
    (ApplyResult, effect_receiver_pb2.ApplyResult, wire.apply_result_to_pb, wire.apply_result_from_pb),
]
WIRE_VALUES = [
    pytest.param(cls, value.name, value.number, to_pb, from_pb, id=value.name)
    for cls, proto, to_pb, from_pb in CODECS
    for value in proto.DESCRIPTOR.values
]


@pytest.mark.parametrize(("cls", "name", "number", "to_pb", "from_pb"), WIRE_VALUES)
def test_every_wire_value_round_trips_through_the_vocabulary(
    cls: type[enum.Enum],
    name: str,
    number: int,
    to_pb: Callable[[Any], int],
    from_pb: Callable[[int], enum.Enum],
) -> None:
    member = from_pb(number)
    assert isinstance(member, cls)
    if cls is Outcome and number == 0:
        # An unset outcome is never read as a success: it is UNKNOWN, which the wire spells itself.
        assert member is Outcome.UNKNOWN
        return
    assert name.endswith("_" + member.value)  # one spelling: the wire's name without its prefix
    assert to_pb(member) == number


@pytest.mark.parametrize(("cls", "proto", "to_pb", "from_pb"), CODECS, ids=[c[0].__name__ for c in CODECS])
def test_every_member_has_a_wire_value_and_an_unknown_number_falls_back(
    cls: type[enum.Enum], proto: Any, to_pb: Callable[[Any], int], from_pb: Callable[[int], enum.Enum]
) -> None:
    assert {from_pb(to_pb(member)) for member in cls} == set(cls)
    fallback = Outcome.UNKNOWN if cls is Outcome else cls["UNSPECIFIED"]
    assert from_pb(max(proto.values()) + 1) is fallback  # a newer peer's value
    assert set(wire.numbers(cls).values()) == set(cls)


def test_every_role_round_trips_and_a_role_this_side_does_not_know_grants_nothing() -> None:
    for role in Role:
        assert common_pb2.Role.Name(wire.role_to_pb(role)) == "ROLE_" + role.name
        assert wire.roles_from_pb([wire.role_to_pb(role)]) == {role}
    assert {f"ROLE_{role.name}" for role in Role} == set(common_pb2.Role.keys()) - {"ROLE_UNSPECIFIED"}
    newer = max(common_pb2.Role.values()) + 1
    assert wire.roles_from_pb([common_pb2.ROLE_UNSPECIFIED, newer, common_pb2.ROLE_AUTHOR]) == {Role.AUTHOR}
    # The value is the spelling of credentials files and role maps.
    assert [role.value for role in Role] == [
        "reviewer",
        "author",
        "operator",
        "effect_writer",
        "effect_reader",
        "auditor",
    ]


def test_receipt_and_effect_request_round_trip_through_the_wire() -> None:
    receipt = Receipt("rcpt-1", OP, AT)
    assert wire.receipt_from_pb(wire.receipt_to_pb(receipt)) == receipt
    timeless = Receipt("rcpt-2", OP, None)
    assert wire.receipt_from_pb(wire.receipt_to_pb(timeless)) == timeless
    for first_attempted_at in (AT, None):
        request = EffectRequest(OP, CaseId("T-1042"), "record_support_review", b"{}", "0" * 64, first_attempted_at)
        message = wire.effect_request_to_pb(request)
        assert message.HasField("first_attempted_at") is (first_attempted_at is not None)
        assert wire.effect_request_from_pb(message) == request


def test_stored_columns_keep_the_text_existing_databases_hold() -> None:
    stored_states = [s for s in OperationState if s not in (OperationState.UNSPECIFIED, OperationState.SUPERSEDED)]
    assert [columns.state_text(s) for s in stored_states] == [
        "pending_review",
        "approved",
        "unknown",
        "committed",
        "declined",
        "rejected",
        "expired",  # since orchestrator revision 0006
    ]
    assert [columns.decision_text(d) for d in (Decision.APPROVE, Decision.DECLINE)] == ["approve", "decline"]
    assert [columns.lookup_text(s) for s in LookupStatus] == ["failed", "applied", "not_found"]
    assert [columns.consistency_text(c) for c in Consistency] == ["none", "strong", "eventual"]
    for state in stored_states:
        assert columns.state_of(columns.state_text(state)) is state
    for status in LookupStatus:
        assert columns.lookup_of(columns.lookup_text(status)) is status
    for consistency in Consistency:
        assert columns.consistency_of(columns.consistency_text(consistency)) is consistency


def test_the_id_patterns_are_the_shared_ones() -> None:
    assert operation_id_violations(OP) == [] and case_id_violations("T-1042.a_b") == []
    assert [v.field for v in operation_id_violations("op-v1-short", "ids[3]")] == ["ids[3]"]
    assert [v.field for v in case_id_violations("x" * 65) + case_id_violations("")] == ["case_id", "case_id"]


# The names the vocabulary defines once; a class or pattern of the same meaning elsewhere is a second spelling.
SHARED_CLASSES = {
    "Decision",
    "OperationState",
    "State",
    "Outcome",
    "LookupStatus",
    "Finding",
    "Consistency",
    "ApplyResult",
    "ApplyOutcome",
    "Receipt",
    "Violation",
    "FieldViolation",
    "EffectRequest",
    "Role",
}
HOMES = {
    "clients/python/src/decisionflow/vocabulary.py",
    # The shared field violation, which the vocabulary's checks return (no grpc, no vocabulary import).
    "clients/python/src/decisionflow/reasons/_declaration.py",
}
CASE_ID_REGEX = "A-Za-z0-9._-]{1,64}"


def _tracked_modules() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if "/v1/" not in name and (ROOT / name).exists()]


def test_every_module_uses_the_one_definition() -> None:
    seconds: list[str] = []
    for path in _tracked_modules():
        relative = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in SHARED_CLASSES and relative not in HOMES:
                seconds.append(f"{relative}:{node.lineno} class {node.name}")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "apply":
                names = {a.arg for a in node.args.args + node.args.kwonlyargs}
                if "payload_digest" in names:
                    seconds.append(f"{relative}:{node.lineno} apply() with the fields of an EffectRequest")
        if CASE_ID_REGEX in text and relative not in HOMES | {"tests/shared/test_vocabulary.py"}:
            seconds.append(f"{relative}: the case-id pattern")
    assert seconds == [], "\n".join(seconds)
