"""The Apply payload: the record of an approved reply that the orchestrator sends and the receiver stores.

The orchestrator builds it once, from stored rows only, and keeps the exact bytes; a re-drive
sends the same bytes again, and the receiver compares their SHA-256 digest with the one it
holds. So ``encode`` must never change its output for the same fields: canonical JSON (keys
sorted, no spaces, UTF-8 without escapes) and ``decided_at`` in ISO 8601 with microseconds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from decisionflow.vocabulary import Decision
from decisionflow_server.foundation import strict_json

# A decision as the payload spells it: its lowercase label, which the bytes of every payload ever
# sent carry ("approve", "decline"); only an approval is ever sent.
APPROVE = Decision.APPROVE.label
DECLINE = Decision.DECLINE.label
DECISIONS = (APPROVE, DECLINE)
FIELDS = (
    "operation_id",
    "case_id",
    "action",
    "body",
    "evidence_id",
    "policy_id",
    "reviewer",
    "decision",
    "decided_at",
)


class PayloadProblem(NamedTuple):
    """One reason a payload is refused: the field (``payload`` or ``payload.<key>``) and why."""

    field: str
    description: str


class PayloadError(ValueError):
    """The bytes are not an Apply payload; problems lists every reason found."""

    def __init__(self, problems: list[PayloadProblem]) -> None:
        super().__init__("; ".join(f"{p.field} {p.description}" for p in problems))
        self.problems = problems


def payload_digest(payload: bytes) -> str:
    """Return the lowercase hex SHA-256 of payload, the digest an Apply carries."""
    return hashlib.sha256(payload).hexdigest()


@dataclass(frozen=True, slots=True)
class EffectPayload:
    """The fields of an Apply payload; decided_at carries its UTC offset."""

    operation_id: str
    case_id: str
    action: str
    body: str
    evidence_id: str
    policy_id: str
    reviewer: str
    decision: str
    decided_at: datetime

    def encode(self) -> bytes:
        """Return the canonical bytes: equal fields always give equal bytes (and so an equal digest)."""
        document = {
            "operation_id": self.operation_id,
            "case_id": self.case_id,
            "action": self.action,
            "body": self.body,
            "evidence_id": self.evidence_id,
            "policy_id": self.policy_id,
            "reviewer": self.reviewer,
            "decision": self.decision,
            "decided_at": self.decided_at.isoformat(timespec="microseconds"),
        }
        return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    def digest(self) -> str:
        """Return the SHA-256 hex digest of encode()."""
        return payload_digest(self.encode())

    @classmethod
    def decode(cls, payload: bytes) -> EffectPayload:
        """Read a payload strictly (UTF-8, strict JSON object, every field a string, a known decision,
        decided_at with a UTC offset); raise PayloadError naming every problem. Unknown keys are ignored."""
        document = _document(payload)
        problems: list[PayloadProblem] = []
        for key in FIELDS:
            if key not in document:
                problems.append(PayloadProblem(f"payload.{key}", "is required"))
            elif not isinstance(document[key], str):
                problems.append(PayloadProblem(f"payload.{key}", "must be a string"))
        if document.get("reviewer") == "":
            problems.append(PayloadProblem("payload.reviewer", "must not be empty"))
        decision = document.get("decision")
        if isinstance(decision, str) and decision not in DECISIONS:
            problems.append(PayloadProblem("payload.decision", f"must be one of: {', '.join(DECISIONS)}"))
        decided_at = None
        if isinstance(document.get("decided_at"), str):
            decided_at = _decided_at(document["decided_at"])
            if decided_at is None:
                problems.append(PayloadProblem("payload.decided_at", "must be an ISO 8601 time with a UTC offset"))
        if problems or decided_at is None:
            raise PayloadError(problems)
        return cls(**{key: document[key] for key in FIELDS if key != "decided_at"}, decided_at=decided_at)


def _document(payload: bytes) -> dict[str, Any]:
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        raise PayloadError([PayloadProblem("payload", "must be UTF-8")]) from None
    try:
        document = strict_json.loads(text)
    except strict_json.StrictJSONError as exc:
        # Two readers of a repeated key could disagree about what was approved.
        if exc.duplicate_key is not None:
            reason = f"JSON object has the key {exc.duplicate_key!r} twice"
        else:
            reason = f"must be a JSON object: {exc}"
        raise PayloadError([PayloadProblem("payload", reason)]) from None
    if not isinstance(document, dict):
        raise PayloadError([PayloadProblem("payload", "must be a JSON object")])
    return document


def _decided_at(value: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(value)
        if moment.utcoffset() is None:
            return None
        moment.astimezone(UTC)  # stored in UTC: a time that leaves years 1 to 9999 there cannot be
    except (ValueError, OverflowError):
        return None
    return moment
