"""Operation, evidence and policy identities over canonical framed bytes (docs/identities.md).

Each field is normalised (CRLF and lone CR become LF, nothing else changes), encoded as
UTF-8 and prefixed by its byte length as a 4-byte big-endian unsigned integer. An
identity is a prefix followed by the lowercase hex SHA-256 of the framed fields. A
digest is an identifier, not a signature.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from decisionflow.vocabulary import OPERATION_ID_PATTERN, OperationId

OPERATION_PREFIX = "op-v1-"
EVIDENCE_PREFIX = "ev-v1-"
POLICY_PREFIX = "pol-v1-"
OPERATION_DOMAIN = "decisionflow.operation.v1"
EVIDENCE_DOMAIN = "decisionflow.evidence.v1"
POLICY_DOMAIN = "decisionflow.policy.v1"

_MAX_FIELD_BYTES = 0xFFFFFFFF
_LENGTH_PREFIX = struct.Struct(">I")
_LENGTH = _LENGTH_PREFIX.pack


class IdentityError(ValueError):
    """The input cannot be given an identity (for example a lone surrogate or a duplicate source)."""


@dataclass(frozen=True, slots=True)
class EvidenceItem:
    """One quoted source: its id, its version and the quotation taken from that version."""

    source_id: str
    version: int
    quotation: str


@dataclass(frozen=True, slots=True)
class PolicyRef:
    """The policy a proposal is checked against; every field and rule is part of the identity."""

    name: str
    version_label: str
    allowance_units: int
    rules: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Identities:
    """The three identities of one proposal."""

    operation_id: OperationId
    evidence_id: str
    policy_id: str


def normalise(text: str) -> str:
    """Return text with CRLF and lone CR replaced by LF; nothing else changes."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def frame(fields: Iterable[str]) -> bytes:
    """Return the framed bytes: each normalised field as UTF-8, prefixed by its 4-byte big-endian length."""
    parts: list[bytes] = []
    for value in fields:
        # Only a field holding a CR can change; skipping the two replace() scans of every
        # other field halves the cost of an operation id over a 2 KB body.
        text = normalise(value) if "\r" in value else value
        try:
            encoded = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise IdentityError(f"field is not valid Unicode text (lone surrogate at {exc.start})") from exc
        if len(encoded) > _MAX_FIELD_BYTES:
            raise IdentityError("field longer than 4 GiB cannot be framed")
        parts.append(_LENGTH(len(encoded)))
        parts.append(encoded)
    return b"".join(parts)


def unframe(data: bytes, error: type[Exception]) -> list[str]:
    """Return the fields framed in data (as frame writes them); raise error on bytes frame would not write
    that far: a length prefix cut short, a field longer than the bytes left, a field not UTF-8."""
    fields, offset = [], 0
    while offset < len(data):
        if offset + 4 > len(data):
            raise error("a field's length prefix is cut short")
        (length,) = _LENGTH_PREFIX.unpack_from(data, offset)
        offset += 4
        if offset + length > len(data):
            raise error("a field is longer than the bytes left")
        try:
            fields.append(data[offset : offset + length].decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise error("a field is not UTF-8") from exc
        offset += length
    return fields


def _digest(prefix: str, fields: Iterable[str]) -> str:
    return prefix + hashlib.sha256(frame(fields)).hexdigest()


def _decimal(value: int, what: str) -> str:
    # bool is an int subclass; True is not a version.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IdentityError(f"{what} must be a non-negative integer")
    return str(value)


def evidence_id(evidence: Sequence[EvidenceItem]) -> str:
    """Return the ev-v1- identity of a list of sources; order does not matter, a duplicate is refused."""
    # Sort and compare normalised ids: framing normalises them, so "a\rb" and "a\nb" are one source
    # and must take the same place in the order.
    ordered = sorted(evidence, key=lambda item: normalise(item.source_id))
    fields = [EVIDENCE_DOMAIN, str(len(ordered))]
    previous: str | None = None
    for item in ordered:
        if normalise(item.source_id) == previous:
            raise IdentityError(f"duplicate source_id {item.source_id!r}")
        previous = normalise(item.source_id)
        fields += [item.source_id, _decimal(item.version, "version"), item.quotation]
    return _digest(EVIDENCE_PREFIX, fields)


def policy_id(policy: PolicyRef) -> str:
    """Return the pol-v1- identity of a policy; rules taken in code point order, a duplicate key refused."""
    fields = [
        POLICY_DOMAIN,
        policy.name,
        policy.version_label,
        _decimal(policy.allowance_units, "allowance_units"),
    ]
    # As for source ids: order and uniqueness are decided on the keys as framed.
    previous: str | None = None
    for key in sorted(policy.rules, key=normalise):
        if normalise(key) == previous:
            raise IdentityError(f"duplicate rule key {key!r} after line-ending normalisation")
        previous = normalise(key)
        fields += [key, policy.rules[key]]
    return _digest(POLICY_PREFIX, fields)


def operation_id(case_id: str, action: str, body: str, evidence_ref: str, policy_ref: str) -> OperationId:
    """Return the op-v1- identity from the case, action, body and the evidence and policy identities."""
    return OperationId(_digest(OPERATION_PREFIX, [OPERATION_DOMAIN, case_id, action, body, evidence_ref, policy_ref]))


def identities(case_id: str, action: str, body: str, evidence: Sequence[EvidenceItem], policy: PolicyRef) -> Identities:
    """Return all three identities of one proposal's content."""
    ev = evidence_id(evidence)
    pol = policy_id(policy)
    return Identities(operation_id(case_id, action, body, ev, pol), ev, pol)


def is_operation_id(value: str) -> bool:
    """Return True when value has the shape of an operation id."""
    return OPERATION_ID_PATTERN.match(value) is not None
