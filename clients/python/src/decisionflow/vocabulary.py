"""The words every side of decisionflow shares, defined once: ids, decisions, states, lookups, receipts,
roles.

Pure values, no grpc and no protobuf: clients, the orchestrator, the receiver and the reconciler all
import these, and ``decisionflow.vocabulary_wire`` is the one place that turns them into wire values
and back. An enum member is spelled as the wire spells it without its prefix
(``DECISION_APPROVE`` is ``Decision.APPROVE``); ``label`` is the lowercase spelling that logs,
metrics and the orchestrator's stored columns have always used, and must keep.

UNSPECIFIED is a member wherever the wire has it: a decision the caller omitted, a lookup that
failed (no answer, so no status and no consistency), a value a newer peer sends that this side
does not know.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime
from typing import NewType

from decisionflow.reasons import FieldViolation

# A group is named by review rules and by identities (credentials files, OIDC claims) and compared byte
# for byte: one spelling only (lowercase, no spaces, no path separators), short enough to record beside a
# decision in the audit log.
GROUP_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")

__all__ = [
    "CASE_ID_PATTERN",
    "OPEN_STATES",
    "OPERATION_ID_PATTERN",
    "ApplyResult",
    "CaseId",
    "Consistency",
    "Decision",
    "EffectRequest",
    "LookupStatus",
    "OperationId",
    "OperationState",
    "Outcome",
    "Receipt",
    "Role",
    "case_id_violations",
    "operation_id_violations",
]

OperationId = NewType("OperationId", str)
"""An operation identity (``op-v1-`` and 64 lowercase hex digits): the idempotency key of its effect."""

CaseId = NewType("CaseId", str)
"""The case a proposal answers (1 to 64 of letters, digits, '.', '_', '-')."""

# The shape of an operation id (decisionflow.identity computes them) and of a case id.
OPERATION_ID_PATTERN = re.compile(r"\Aop-v1-[0-9a-f]{64}\Z")
CASE_ID_PATTERN = re.compile(r"\A[A-Za-z0-9._-]{1,64}\Z")


def operation_id_violations(value: str, field: str = "operation_id") -> list[FieldViolation]:
    """Return why value is not a well-formed operation id (empty when it is)."""
    if OPERATION_ID_PATTERN.match(value):
        return []
    return [FieldViolation(field, "must be op-v1- followed by 64 lowercase hex digits")]


def case_id_violations(value: str, field: str = "case_id") -> list[FieldViolation]:
    """Return why value is not a well-formed case id (empty when it is)."""
    if CASE_ID_PATTERN.match(value):
        return []
    return [FieldViolation(field, "must be 1 to 64 characters of letters, digits, '.', '_', '-'")]


class _Word(enum.StrEnum):
    @property
    def label(self) -> str:
        """The lowercase spelling of logs, metric labels and stored columns (``approve``, ``pending_review``)."""
        return self.value.lower()


class Decision(_Word):
    """A reviewer's decision; UNSPECIFIED (omitted) is always refused by the server."""

    UNSPECIFIED = "UNSPECIFIED"
    APPROVE = "APPROVE"
    DECLINE = "DECLINE"

    @classmethod
    def parse(cls, text: str) -> Decision:
        """Return the decision named by text (``APPROVE``, ``DECISION_APPROVE``, ``approve``), else UNSPECIFIED."""
        name = text.strip().upper().removeprefix("DECISION_")
        return cls.__members__.get(name, cls.UNSPECIFIED)


class OperationState(_Word):
    """Where an operation stands (docs/review-protocol.md); UNSPECIFIED only for a value this side does not know."""

    UNSPECIFIED = "UNSPECIFIED"
    PENDING_REVIEW = "PENDING_REVIEW"
    APPROVED = "APPROVED"
    UNKNOWN = "UNKNOWN"
    COMMITTED = "COMMITTED"
    DECLINED = "DECLINED"
    REJECTED = "REJECTED"
    SUPERSEDED = "SUPERSEDED"
    EXPIRED = "EXPIRED"


# The states in which an operation's effect is still open: a lookup or a re-drive may settle it.
OPEN_STATES = frozenset({OperationState.APPROVED, OperationState.UNKNOWN})


class Outcome(_Word):
    """What a decision or re-drive achieved. UNKNOWN is neither success nor failure: a lookup settles it.
    AWAITING_APPROVALS is an answer, not an error: the vote counts, and the review's rule needs more
    approvals before the effect is written (the operation stays PENDING_REVIEW)."""

    COMMITTED = "COMMITTED"
    DECLINED = "DECLINED"
    REJECTED = "REJECTED"
    UNKNOWN = "UNKNOWN"
    AWAITING_APPROVALS = "AWAITING_APPROVALS"


class LookupStatus(_Word):
    """What a lookup at the receiver found; UNSPECIFIED when the lookup failed (no answer came back)."""

    UNSPECIFIED = "UNSPECIFIED"
    APPLIED = "APPLIED"
    NOT_FOUND = "NOT_FOUND"


class Consistency(_Word):
    """How fresh a lookup answer is: STRONG from the primary, EVENTUAL from a replica; only a STRONG
    NOT_FOUND is authoritative. UNSPECIFIED when there was no answer."""

    UNSPECIFIED = "UNSPECIFIED"
    STRONG = "STRONG"
    EVENTUAL = "EVENTUAL"


class ApplyResult(_Word):
    """Whether an Apply wrote the effect (CREATED) or found it written with the same payload (REPLAYED)."""

    UNSPECIFIED = "UNSPECIFIED"
    CREATED = "CREATED"
    REPLAYED = "REPLAYED"


class Role(enum.Enum):
    """What a principal may do; each RPC names the roles allowed to call it (docs/security.md).

    Unlike the words above, a role's value is its lowercase name (``reviewer``, ``effect_writer``):
    the spelling of credentials files, role maps and the ``required_roles`` of a refusal. The wire
    spells it by name (``ROLE_REVIEWER`` is ``Role.REVIEWER``). There is no UNSPECIFIED member:
    a role this side does not know grants nothing here, so it is left out rather than guessed.
    """

    REVIEWER = "reviewer"
    AUTHOR = "author"
    OPERATOR = "operator"
    EFFECT_WRITER = "effect_writer"
    EFFECT_READER = "effect_reader"
    AUDITOR = "auditor"


@dataclass(frozen=True, slots=True)
class Receipt:
    """The receiver's proof that the effect of operation_id was written, and when.

    applied_at is None only when a peer's answer left the time out (the orchestrator then treats
    the Apply as indeterminate).
    """

    receipt_id: str
    operation_id: OperationId
    applied_at: datetime | None


@dataclass(frozen=True, slots=True)
class EffectRequest:
    """One Apply: write the effect of operation_id once, with payload as the business record.

    The operation id is the idempotency key: the same request again replays the original receipt.
    first_attempted_at (when this operation's first Apply was sent) lets a receiver with a key
    retention refuse an Apply whose key may already have been pruned; None from an older caller.
    """

    operation_id: OperationId
    case_id: CaseId
    kind: str
    payload: bytes
    payload_digest: str
    first_attempted_at: datetime | None = None
