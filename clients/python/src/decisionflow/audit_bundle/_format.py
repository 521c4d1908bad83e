"""The bundle file: one JSON object, read strictly (docs/audit-log.md, "Exporting and verifying a bundle").

    {
      "format": "decisionflow.audit.bundle.v1",
      "origin": "<the log's origin>",
      "scope": {"all": true} | {"operation_id": "op-v1-…"} | {"case_id": "T-1042"},
      "checkpoint": "<the signed checkpoint note, exactly as signed>",
      "leaves": [{"index": 0, "data": "<base64 leaf bytes>", "proof": ["<base64 hash>", …]}, …],
      "since": {"checkpoint": "<an older signed checkpoint>", "proof": ["<base64 hash>", …]},   (optional)
      "records": [{"operation_id": "op-v1-…", "found": true, "state": "COMMITTED", "decision": "APPROVE",
                   "reviewer": "rita", "receipt_id": "rcpt-…"}, …],
      "exported_at": "2026-12-04T08:30:00+00:00"
    }

Leaf bytes and hashes stay base64 text here: that a leaf's text is not base64 is a finding about
that leaf (the verifier names it), not a malformed file. Anything else out of shape (a missing or
unknown key, a wrong type, a key given twice) is MalformedBundle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FORMAT = "decisionflow.audit.bundle.v1"


class MalformedBundle(ValueError):
    """The file is not a bundle of this format; the message says where."""


@dataclass(frozen=True, slots=True)
class BundleLeaf:
    """One leaf of the bundle: its index, its bytes and its inclusion proof, as base64 text."""

    index: int
    data: str
    proof: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Since:
    """An older checkpoint and the consistency proof from it to the bundle's checkpoint."""

    checkpoint: str
    proof: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Record:
    """The orchestrator's record of an operation when exported (GetOperation): what its leaves must match."""

    operation_id: str
    found: bool
    state: str = ""
    decision: str = ""
    reviewer: str = ""
    receipt_id: str = ""


@dataclass(frozen=True, slots=True)
class Bundle:
    """A signed checkpoint, leaves with their proofs at its size, and the orchestrator's records."""

    origin: str
    scope: Mapping[str, str | bool]
    checkpoint: str
    leaves: tuple[BundleLeaf, ...]
    records: tuple[Record, ...] = ()
    since: Since | None = None
    exported_at: str = ""
    format: str = field(default=FORMAT)

    @property
    def whole_log(self) -> bool:
        """True when the bundle claims every leaf of its checkpoint's tree."""
        return self.scope.get("all") is True


def dump_bundle(bundle: Bundle) -> str:
    """The bundle as the file's text (keys in the order above, one JSON object)."""
    document: dict[str, Any] = {
        "format": bundle.format,
        "origin": bundle.origin,
        "scope": dict(bundle.scope),
        "checkpoint": bundle.checkpoint,
        "leaves": [{"index": leaf.index, "data": leaf.data, "proof": list(leaf.proof)} for leaf in bundle.leaves],
    }
    if bundle.since is not None:
        document["since"] = {"checkpoint": bundle.since.checkpoint, "proof": list(bundle.since.proof)}
    document["records"] = [
        {
            "operation_id": record.operation_id,
            "found": record.found,
            "state": record.state,
            "decision": record.decision,
            "reviewer": record.reviewer,
            "receipt_id": record.receipt_id,
        }
        for record in bundle.records
    ]
    document["exported_at"] = bundle.exported_at
    return json.dumps(document, ensure_ascii=False, indent=1) + "\n"


def _no_repeats(pairs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise MalformedBundle(f"the key {key!r} is given twice")
        found[key] = value
    return found


def _object(value: Any, where: str, required: set[str], optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedBundle(f"{where} is not a JSON object")
    missing, unknown = required - value.keys(), value.keys() - required - optional
    if missing or unknown:
        problem = f"lacks {sorted(missing)}" if missing else f"has unknown keys {sorted(unknown)}"
        raise MalformedBundle(f"{where} {problem}")
    return value


def _typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise MalformedBundle(f"{where} is not {getattr(kind, '__name__', 'of the right type')}")
    return value


def _texts(value: Any, where: str) -> tuple[str, ...]:
    return tuple(_typed(item, str, f"{where}[{i}]") for i, item in enumerate(_typed(value, list, where)))


def _leaf(value: Any, where: str) -> BundleLeaf:
    leaf = _object(value, where, {"index", "data", "proof"})
    index = _typed(leaf["index"], int, f"{where}.index")
    return BundleLeaf(index, _typed(leaf["data"], str, f"{where}.data"), _texts(leaf["proof"], f"{where}.proof"))


def _record(value: Any, where: str) -> Record:
    keys = {"operation_id", "found", "state", "decision", "reviewer", "receipt_id"}
    record = _object(value, where, keys)
    texts = {key: _typed(record[key], str, f"{where}.{key}") for key in keys - {"found"}}
    return Record(found=_typed(record["found"], bool, f"{where}.found"), **texts)


def _scope(value: Any) -> dict[str, str | bool]:
    scope = _object(value, "scope", set(), frozenset({"all", "operation_id", "case_id"}))
    if len(scope) != 1 or scope.get("all", True) is not True:
        raise MalformedBundle('scope is not one of {"all": true}, {"operation_id": …}, {"case_id": …}')
    for key in ("operation_id", "case_id"):
        if key in scope:
            _typed(scope[key], str, f"scope.{key}")
    return scope


def load_bundle(text: str) -> Bundle:
    """The bundle the text holds; MalformedBundle when it is not one of this format."""
    try:
        document = json.loads(text, object_pairs_hook=_no_repeats)
    except json.JSONDecodeError as exc:
        raise MalformedBundle(f"not JSON: {exc}") from exc
    required = {"format", "origin", "scope", "checkpoint", "leaves", "records", "exported_at"}
    top = _object(document, "the bundle", required, frozenset({"since"}))
    if top["format"] != FORMAT:
        raise MalformedBundle(f"format {top['format']!r} is not {FORMAT}")
    since = None
    if "since" in top:
        raw = _object(top["since"], "since", {"checkpoint", "proof"})
        since = Since(_typed(raw["checkpoint"], str, "since.checkpoint"), _texts(raw["proof"], "since.proof"))
    leaves = _typed(top["leaves"], list, "leaves")
    records = _typed(top["records"], list, "records")
    return Bundle(
        origin=_typed(top["origin"], str, "origin"),
        scope=_scope(top["scope"]),
        checkpoint=_typed(top["checkpoint"], str, "checkpoint"),
        leaves=tuple(_leaf(leaf, f"leaves[{i}]") for i, leaf in enumerate(leaves)),
        records=tuple(_record(record, f"records[{i}]") for i, record in enumerate(records)),
        since=since,
        exported_at=_typed(top["exported_at"], str, "exported_at"),
    )
