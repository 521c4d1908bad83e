"""A proposal's identity-bearing content read from JSON, strictly: exactly the known fields at every
level, strings that are Unicode text, non-negative integers that are not booleans or floats, no
duplicate JSON keys and no duplicate source ids. ``decisionflow identity`` and the review commands
read proposal files with it, and the demo its seeded proposals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from decisionflow.identity import EvidenceItem, IdentityError, PolicyRef, normalise
from decisionflow_server.foundation import strict_json

_PROPOSAL_FIELDS = ("case_id", "action", "body", "evidence", "policy")
_SOURCE_FIELDS = ("source_id", "version", "quotation")
_POLICY_FIELDS = ("name", "version_label", "allowance_units", "rules")


class ProposalFormatError(IdentityError):
    """The proposal JSON is malformed or breaks its shape; the message names the offending field."""


class ProposalContent(NamedTuple):
    """The parts of a proposal its identities are computed from, in ``identities()`` argument order."""

    case_id: str
    action: str
    body: str
    evidence: tuple[EvidenceItem, ...]
    policy: PolicyRef


def proposal_from_json(text: str) -> ProposalContent:
    """Parse proposal JSON strictly; raise ProposalFormatError naming the first field that is wrong."""
    proposal = _object(load_json(text), "proposal", _PROPOSAL_FIELDS)
    return ProposalContent(
        case_id=_text(proposal["case_id"], "case_id"),
        action=_text(proposal["action"], "action"),
        body=_text(proposal["body"], "body"),
        evidence=_evidence(proposal["evidence"]),
        policy=_policy(proposal["policy"]),
    )


def load_json(text: str) -> object:
    """Parse text as strict JSON; raise ProposalFormatError saying why it is not."""
    try:
        return strict_json.loads(text)
    except strict_json.StrictJSONError as exc:
        if exc.duplicate_key is not None:
            raise ProposalFormatError(str(exc)) from exc
        raise ProposalFormatError(f"not JSON: {exc}") from exc


def _json_type(value: object) -> str:
    names: dict[type, str] = {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number with a fraction or exponent",
    }
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _object(value: object, where: str, names: Sequence[str]) -> dict[str, object]:
    if not isinstance(value, dict):
        raise ProposalFormatError(f"{where}: must be an object, not {_json_type(value)}")
    unknown = [key for key in value if key not in names]
    if unknown:
        raise ProposalFormatError(f"{where}: unknown field {unknown[0]!r}")
    missing = [name for name in names if name not in value]
    if missing:
        raise ProposalFormatError(f"{where}: missing field {missing[0]!r}")
    return value


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ProposalFormatError(f"{where}: must be a string, not {_json_type(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        # JSON "\ud800" escapes decode to lone surrogates, which have no UTF-8 form to frame.
        raise ProposalFormatError(f"{where}: lone surrogate at index {exc.start} is not text") from exc
    return value


def _count(value: object, where: str) -> int:
    # bool is an int subclass and 2.0 == 2; neither is a version or an allowance.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProposalFormatError(f"{where}: must be a non-negative integer, not {_json_type(value)}")
    if value < 0:
        raise ProposalFormatError(f"{where}: must be a non-negative integer, not a negative one")
    return value


def _evidence(value: object) -> tuple[EvidenceItem, ...]:
    if not isinstance(value, list):
        raise ProposalFormatError(f"evidence: must be an array, not {_json_type(value)}")
    items: list[EvidenceItem] = []
    seen: set[str] = set()
    for index, entry in enumerate(value):
        where = f"evidence[{index}]"
        source = _object(entry, where, _SOURCE_FIELDS)
        source_id = _text(source["source_id"], f"{where}.source_id")
        # Compared as framed, so ids differing only in line endings count as one source.
        if normalise(source_id) in seen:
            raise ProposalFormatError(f"{where}.source_id: duplicate source id {source_id!r}")
        seen.add(normalise(source_id))
        items.append(
            EvidenceItem(
                source_id=source_id,
                version=_count(source["version"], f"{where}.version"),
                quotation=_text(source["quotation"], f"{where}.quotation"),
            )
        )
    return tuple(items)


def _policy(value: object) -> PolicyRef:
    policy = _object(value, "policy", _POLICY_FIELDS)
    rules = policy["rules"]
    if not isinstance(rules, dict):
        raise ProposalFormatError(f"policy.rules: must be an object, not {_json_type(rules)}")
    checked: dict[str, str] = {}
    seen: set[str] = set()
    for key, rule in rules.items():
        _text(key, "policy.rules key")
        if normalise(key) in seen:
            raise ProposalFormatError(f"policy.rules: duplicate key {key!r} after line-ending normalisation")
        seen.add(normalise(key))
        checked[key] = _text(rule, f"policy.rules[{key!r}]")
    return PolicyRef(
        name=_text(policy["name"], "policy.name"),
        version_label=_text(policy["version_label"], "policy.version_label"),
        allowance_units=_count(policy["allowance_units"], "policy.allowance_units"),
        rules=checked,
    )
