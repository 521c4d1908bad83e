"""What the receiver stores and answers, and the rules a request must satisfy before anything is written.

An effect is keyed by its operation id. Its payload is the canonical JSON the orchestrator
built once; the receiver checks that the payload is what the request claims (same operation,
case and action, digest equal to SHA-256 of the bytes) and takes the business record
(body, reviewer, decision time) from it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from decisionflow.reasons import FieldViolation
from decisionflow.vocabulary import (
    ApplyResult,
    CaseId,
    Consistency,
    EffectRequest,
    OperationId,
    Receipt,
    case_id_violations,
    operation_id_violations,
)
from decisionflow_server.foundation.payload import EffectPayload, PayloadError, payload_digest

RECORD_SUPPORT_REVIEW = "record_support_review"
KINDS = frozenset({RECORD_SUPPORT_REVIEW})

MAX_PAYLOAD_BYTES = 256 * 1024
MAX_REVIEWER_CHARS = 256  # the width of support_review_records.reviewer
DIGEST_PATTERN = re.compile(r"\A[0-9a-f]{64}\Z")
MAX_BATCH_LOOKUP = 1000
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
# Allowance for the orchestrator's clock running behind the receiver's: an Apply is refused this much
# before its key could have been pruned. Refusing early is always safe; it only escalates sooner.
RETENTION_SKEW_MARGIN = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class Effect:
    """A validated effect to write: its key, case, kind, payload and digest, and the business record."""

    operation_id: OperationId
    case_id: CaseId
    kind: str
    payload: bytes
    payload_digest: str
    body: str
    reviewer: str
    decided_at: datetime


@dataclass(frozen=True, slots=True)
class AppliedEffect:
    """A written effect as listed for operators: its key, business record and receipt."""

    sequence: int
    operation_id: OperationId
    case_id: CaseId
    kind: str
    payload_digest: str
    body: str
    reviewer: str
    receipt: Receipt


@dataclass(frozen=True, slots=True)
class ApplyAnswer:
    """The result of an Apply: CREATED or REPLAYED, always with the original receipt."""

    outcome: ApplyResult
    receipt: Receipt


@dataclass(frozen=True, slots=True)
class LookupAnswer:
    """What the receiver knew about one operation id at observed_at; receipt is None when not found."""

    operation_id: OperationId
    receipt: Receipt | None
    consistency: Consistency
    observed_at: datetime

    @property
    def applied(self) -> bool:
        """True when the effect exists."""
        return self.receipt is not None


@dataclass(frozen=True, slots=True)
class EffectPage:
    """One page of a case's effects, oldest first; next_after is the cursor for the next page, if any."""

    effects: tuple[AppliedEffect, ...]
    next_after: int | None


def batch_violations(operation_ids: Sequence[str]) -> list[FieldViolation]:
    """Return why a batch lookup request is refused: 1 to 1,000 ids, each well formed."""
    if not 1 <= len(operation_ids) <= MAX_BATCH_LOOKUP:
        return [FieldViolation("operation_ids", f"must hold 1 to {MAX_BATCH_LOOKUP} ids, not {len(operation_ids)}")]
    violations: list[FieldViolation] = []
    for index, operation_id in enumerate(operation_ids):
        violations += operation_id_violations(operation_id, f"operation_ids[{index}]")
    return violations


def page_size_violations(page_size: int) -> list[FieldViolation]:
    """Return why page_size is refused: 0 (the default) or 1 to 1,000."""
    if 0 <= page_size <= MAX_PAGE_SIZE:
        return []
    return [FieldViolation("page_size", f"must be between 0 and {MAX_PAGE_SIZE}")]


def _storable_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def check_effect(request: EffectRequest) -> Effect | list[FieldViolation]:
    """Return the Effect an Apply describes, or every reason it is refused (then nothing may be written)."""
    operation_id, case_id, kind, payload, digest = (
        request.operation_id,
        request.case_id,
        request.kind,
        request.payload,
        request.payload_digest,
    )
    violations = operation_id_violations(operation_id) + case_id_violations(case_id)
    if kind not in KINDS:
        violations.append(FieldViolation("kind", f"must be one of: {', '.join(sorted(KINDS))}"))
    if not DIGEST_PATTERN.match(digest):
        violations.append(FieldViolation("payload_digest", "must be 64 lowercase hex digits"))
    elif payload_digest(payload) != digest:
        violations.append(FieldViolation("payload_digest", "is not the SHA-256 of payload"))
    if len(payload) > MAX_PAYLOAD_BYTES:
        violations.append(FieldViolation("payload", f"must be at most {MAX_PAYLOAD_BYTES} bytes, not {len(payload)}"))
        return violations
    try:
        decoded = EffectPayload.decode(payload)
    except PayloadError as exc:
        return violations + [FieldViolation(problem.field, problem.description) for problem in exc.problems]
    for key, expected in (("operation_id", operation_id), ("case_id", case_id), ("action", kind)):
        if getattr(decoded, key) != expected:
            request_field = "kind" if key == "action" else key
            violations.append(FieldViolation(f"payload.{key}", f"must equal the request's {request_field}"))
    # The business record stores these as text: refuse what the database cannot hold (PostgreSQL
    # rejects NUL, UTF-8 has no unpaired surrogates, reviewer is VARCHAR(256)) instead of failing
    # the commit with an unexpected error.
    for key in ("body", "reviewer"):
        if not _storable_text(getattr(decoded, key)):
            violations.append(FieldViolation(f"payload.{key}", "contains a NUL or an unpaired surrogate"))
    if len(decoded.reviewer) > MAX_REVIEWER_CHARS:
        violations.append(FieldViolation("payload.reviewer", f"longer than {MAX_REVIEWER_CHARS} characters"))
    if violations:
        return violations
    return Effect(
        operation_id=operation_id,
        case_id=case_id,
        kind=kind,
        payload=payload,
        payload_digest=digest,
        body=decoded.body,
        reviewer=decoded.reviewer,
        decided_at=decoded.decided_at,
    )


def retention_margin(retention: timedelta) -> timedelta:
    """The clock-skew allowance for retention: RETENTION_SKEW_MARGIN, at most half the retention."""
    return min(RETENTION_SKEW_MARGIN, retention / 2)


def beyond_retention(first_attempted_at: datetime | None, retention: timedelta | None, now: datetime) -> bool:
    """True when an effect first attempted at first_attempted_at may already have had its key pruned.

    The prune deletes effects applied before now - retention, and an effect is applied no earlier
    than its operation's first attempt (less the clocks' skew). So an absent key whose first attempt
    is later than now - retention + margin was never written, and a new Apply cannot write a second
    effect; an earlier one may have been written and pruned, and only a refusal is safe. Without a
    retention keys are kept forever, and without first_attempted_at (an older caller) nothing is known.
    """
    if retention is None or first_attempted_at is None:
        return False
    return first_attempted_at < now - retention + retention_margin(retention)
