"""A second implementation of the identities, written from docs/identities.md alone.

It shares no code with decisionflow.identity: its own line-ending rule (a regular expression),
length prefixes by struct, code point order by comparing UTF-8 bytes (which sort like code
points) and duplicate detection by set size. Tests compare it with the product.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterable, Mapping, Sequence

_LINE_BREAK = re.compile(r"\r\n|\r")


def canonical_text(text: str) -> str:
    """CRLF and lone CR to LF, nothing else."""
    return _LINE_BREAK.sub("\n", text)


def framed(fields: Iterable[str]) -> bytes:
    """Length-prefixed (4-byte big-endian) UTF-8 of each canonical field."""
    out = bytearray()
    for text in fields:
        data = canonical_text(text).encode("utf-8")
        out += struct.pack(">I", len(data))
        out += data
    return bytes(out)


def unframe(data: bytes) -> list[str]:
    """Inverse of framed: the canonical fields, or ValueError when data is not a whole frame."""
    fields: list[str] = []
    offset = 0
    while offset < len(data):
        if offset + 4 > len(data):
            raise ValueError("truncated length prefix")
        (size,) = struct.unpack_from(">I", data, offset)
        offset += 4
        if offset + size > len(data):
            raise ValueError("truncated field")
        fields.append(data[offset : offset + size].decode("utf-8"))
        offset += size
    return fields


def _hex_digest(prefix: str, fields: Sequence[str]) -> str:
    return prefix + hashlib.sha256(framed(fields)).hexdigest()


def _decimal(number: int) -> str:
    if type(number) is not int or number < 0:
        raise ValueError("not a non-negative integer")
    return format(number, "d")


def _code_point_key(text: str) -> bytes:
    return canonical_text(text).encode("utf-8")


def evidence_identity(sources: Sequence[tuple[str, int, str]]) -> str:
    """ev-v1- over the domain, the count, then source_id, version, quotation in source_id order."""
    keys = [_code_point_key(source_id) for source_id, _, _ in sources]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate source_id")
    fields = ["decisionflow.evidence.v1", _decimal(len(sources))]
    for source_id, version, quotation in sorted(sources, key=lambda source: _code_point_key(source[0])):
        fields.extend((source_id, _decimal(version), quotation))
    return _hex_digest("ev-v1-", fields)


def policy_identity(name: str, version_label: str, allowance_units: int, rules: Mapping[str, str]) -> str:
    """pol-v1- over the domain, name, label, allowance, then each rule key and value in key order."""
    keys = [_code_point_key(key) for key in rules]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate rule key")
    fields = ["decisionflow.policy.v1", name, version_label, _decimal(allowance_units)]
    for key in sorted(rules, key=_code_point_key):
        fields.extend((key, rules[key]))
    return _hex_digest("pol-v1-", fields)


def operation_identity(case_id: str, action: str, body: str, evidence_ref: str, policy_ref: str) -> str:
    """op-v1- over the domain, case, action, body and the evidence and policy identities."""
    fields = ["decisionflow.operation.v1", case_id, action, body, evidence_ref, policy_ref]
    return _hex_digest("op-v1-", fields)
