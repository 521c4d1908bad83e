"""The shared vocabulary to and from the wire: the one place each direction is written.

Clients and servers both convert here, so a value has one spelling from the gRPC edge to the
store. An enum maps by name (``Decision.APPROVE`` is ``DECISION_APPROVE``), so a member added to
the proto and to ``decisionflow.vocabulary`` needs no table. Reading is lenient: a number this
side's stubs do not know (a newer peer) becomes the enum's UNSPECIFIED member (for an outcome,
UNKNOWN: never a success; a role is left out: it grants nothing). A server that must refuse such a
number looks it up in ``numbers`` instead.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVar

from google.protobuf import timestamp_pb2

from decisionflow.timestamps import from_timestamp, to_timestamp
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
)

_E = TypeVar("_E", bound=enum.Enum)

# Each shared enum's proto wrapper and the prefix its numbers' names carry.
WIRE_ENUMS: dict[type[enum.Enum], tuple[Any, str]] = {
    Decision: (common_pb2.Decision, "DECISION_"),
    OperationState: (common_pb2.OperationState, "OPERATION_STATE_"),
    Outcome: (common_pb2.Outcome, "OUTCOME_"),
    LookupStatus: (common_pb2.LookupStatus, "LOOKUP_STATUS_"),
    Consistency: (common_pb2.Consistency, "CONSISTENCY_"),
    ApplyResult: (effect_receiver_pb2.ApplyResult, "APPLY_RESULT_"),
    Role: (common_pb2.Role, "ROLE_"),
}


def _to_pb(member: enum.Enum) -> Any:
    wrapper, prefix = WIRE_ENUMS[type(member)]
    return wrapper.Value(prefix + member.name)


def _from_pb(cls: type[_E], value: int, fallback: _E) -> _E:
    wrapper, prefix = WIRE_ENUMS[cls]
    try:
        name = str(wrapper.Name(value)).removeprefix(prefix)
    except ValueError:
        return fallback
    return cls.__members__.get(name, fallback)


def numbers(cls: type[_E]) -> dict[int, _E]:
    """Return each number the proto defines for cls with its member (a number without a member is left out).

    A server refuses a request's number outside these: protobuf keeps an unknown number as it
    came (open enums), and taking it for a default would record something the sender never said.
    """
    wrapper, prefix = WIRE_ENUMS[cls]
    names = ((str(name).removeprefix(prefix), int(number)) for name, number in wrapper.items())
    return {number: cls.__members__[name] for name, number in names if name in cls.__members__}


def decision_to_pb(decision: Decision) -> common_pb2.Decision.ValueType:
    """Return the wire value of a decision."""
    number: common_pb2.Decision.ValueType = _to_pb(decision)
    return number


def decision_from_pb(value: int) -> Decision:
    """Return the decision of a wire value; UNSPECIFIED when omitted or unknown."""
    return _from_pb(Decision, value, Decision.UNSPECIFIED)


def state_to_pb(state: OperationState) -> common_pb2.OperationState.ValueType:
    """Return the wire value of an operation state."""
    number: common_pb2.OperationState.ValueType = _to_pb(state)
    return number


def state_from_pb(value: int) -> OperationState:
    """Return the operation state of a wire value; UNSPECIFIED when unknown."""
    return _from_pb(OperationState, value, OperationState.UNSPECIFIED)


def outcome_to_pb(outcome: Outcome) -> common_pb2.Outcome.ValueType:
    """Return the wire value of an outcome."""
    number: common_pb2.Outcome.ValueType = _to_pb(outcome)
    return number


def outcome_from_pb(value: int) -> Outcome:
    """Return the outcome of a wire value; an unset or unknown outcome is UNKNOWN, never a success."""
    return _from_pb(Outcome, value, Outcome.UNKNOWN)


def lookup_status_to_pb(status: LookupStatus) -> common_pb2.LookupStatus.ValueType:
    """Return the wire value of a lookup status."""
    number: common_pb2.LookupStatus.ValueType = _to_pb(status)
    return number


def lookup_status_from_pb(value: int) -> LookupStatus:
    """Return the lookup status of a wire value; UNSPECIFIED (a failed lookup) when unknown."""
    return _from_pb(LookupStatus, value, LookupStatus.UNSPECIFIED)


def consistency_to_pb(consistency: Consistency) -> common_pb2.Consistency.ValueType:
    """Return the wire value of a consistency."""
    number: common_pb2.Consistency.ValueType = _to_pb(consistency)
    return number


def consistency_from_pb(value: int) -> Consistency:
    """Return the consistency of a wire value; UNSPECIFIED when unknown."""
    return _from_pb(Consistency, value, Consistency.UNSPECIFIED)


def apply_result_to_pb(result: ApplyResult) -> effect_receiver_pb2.ApplyResult.ValueType:
    """Return the wire value of an Apply result."""
    number: effect_receiver_pb2.ApplyResult.ValueType = _to_pb(result)
    return number


def apply_result_from_pb(value: int) -> ApplyResult:
    """Return the Apply result of a wire value; UNSPECIFIED when unknown."""
    return _from_pb(ApplyResult, value, ApplyResult.UNSPECIFIED)


def role_to_pb(role: Role) -> common_pb2.Role.ValueType:
    """Return the wire value of a role."""
    number: common_pb2.Role.ValueType = _to_pb(role)
    return number


def roles_from_pb(values: Iterable[int]) -> frozenset[Role]:
    """Return the roles of wire values; UNSPECIFIED and numbers this side does not know grant nothing
    and are left out."""
    known = numbers(Role)
    return frozenset(known[value] for value in values if value in known)


def _timestamp(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    return None if value is None else to_timestamp(value)


def receipt_to_pb(receipt: Receipt) -> common_pb2.Receipt:
    """Return the wire form of a receipt."""
    return common_pb2.Receipt(
        receipt_id=receipt.receipt_id, operation_id=receipt.operation_id, applied_at=_timestamp(receipt.applied_at)
    )


def receipt_from_pb(message: common_pb2.Receipt) -> Receipt:
    """Return the receipt of a wire message (applied_at None when the message leaves it out).

    Raises ValueError for an applied_at outside years 1 to 9999.
    """
    applied_at = from_timestamp(message.applied_at) if message.HasField("applied_at") else None
    return Receipt(message.receipt_id, OperationId(message.operation_id), applied_at)


def effect_request_to_pb(request: EffectRequest) -> effect_receiver_pb2.ApplyRequest:
    """Return the ApplyRequest message of an effect request."""
    message = effect_receiver_pb2.ApplyRequest(
        operation_id=request.operation_id,
        case_id=request.case_id,
        kind=request.kind,
        payload=request.payload,
        payload_digest=request.payload_digest,
    )
    if request.first_attempted_at is not None:
        message.first_attempted_at.CopyFrom(to_timestamp(request.first_attempted_at))
    return message


def effect_request_from_pb(message: effect_receiver_pb2.ApplyRequest) -> EffectRequest:
    """Return the effect request an ApplyRequest carries, its fields unchecked (the receiver validates them).

    Raises ValueError for a first_attempted_at outside years 1 to 9999.
    """
    first_attempted_at = from_timestamp(message.first_attempted_at) if message.HasField("first_attempted_at") else None
    return EffectRequest(
        OperationId(message.operation_id),
        CaseId(message.case_id),
        message.kind,
        message.payload,
        message.payload_digest,
        first_attempted_at,
    )
