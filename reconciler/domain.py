"""The reconciler's rules (docs/reconciler.md): what one lookup at the receiver allows it to do.

Pure functions over frozen dataclasses; no gRPC, no clock of its own (``now`` is passed in).

    lookup                          operation                           verdict
    APPLIED (any consistency)       any open operation                  SETTLE   → COMMITTED with the receipt
    failed / receiver unreachable   any                                 NOTE     (stays open, error noted)
    NOT_FOUND                       first attempt older than retention  ESCALATE (never re-driven)
    NOT_FOUND STRONG                APPROVED or UNKNOWN                 REDRIVE  (NOTE with --no-redrive)
    NOT_FOUND EVENTUAL              APPROVED (never attempted)          REDRIVE  (NOTE with --no-redrive)
    NOT_FOUND EVENTUAL              UNKNOWN                             NOTE     (a replica may lag)

Only SETTLE moves an operation to COMMITTED, and only on the receiver's word. A re-drive is
Apply again under the same operation id with the stored payload, which the receiver
deduplicates for as long as it keeps keys; past that retention a NOT_FOUND may mean "applied
and forgotten", so a re-drive could write a second effect and the operation is escalated.
An APPROVED operation was never attempted (the orchestrator records the attempt before it
sends Apply), so a lagging replica cannot be hiding its effect.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from decisionflow.vocabulary import LookupStatus, OperationId, OperationState


class Action(enum.StrEnum):
    """What the reconciler does with one operation after looking it up."""

    SETTLE = "settle"
    REDRIVE = "redrive"
    NOTE = "note"
    ESCALATE = "escalate"


class RedriveOutcome(enum.StrEnum):
    """How one re-drive ended."""

    COMMITTED = "committed"
    UNKNOWN = "unknown"
    REJECTED = "rejected"
    # Refused as not re-drivable: another reconciler or a replayed approval closed it first.
    ALREADY_SETTLED = "already_settled"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class OpenOperation:
    """An APPROVED or UNKNOWN operation as the orchestrator listed it."""

    operation_id: OperationId
    state: OperationState
    approved: bool
    decided_at: datetime | None
    first_attempt_at: datetime | None
    updated_at: datetime | None = None

    @property
    def open_since(self) -> datetime | None:
        """When the effect's fate became open: the decision, else the first attempt, else the last change."""
        return self.decided_at or self.first_attempt_at or self.updated_at


@dataclass(frozen=True, slots=True)
class LookupFinding:
    """One lookup answer: APPLIED or NOT_FOUND (strong means read from the primary), or UNSPECIFIED and why
    the lookup failed."""

    status: LookupStatus
    strong: bool = False
    error: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The action for one operation and a one-line reason an operator can read."""

    action: Action
    reason: str


def decide(
    operation: OpenOperation,
    lookup: LookupFinding,
    *,
    key_retention: timedelta | None,
    now: datetime,
    redrive_enabled: bool,
    redrive_margin: timedelta = timedelta(0),
) -> Verdict:
    """Return what one lookup allows: settle only on APPLIED, re-drive only while the key is surely kept.

    key_retention None means the receiver keeps keys forever. redrive_margin is the longest a
    re-drive may take to reach the receiver: a first attempt within that margin of the retention
    is treated as already past it.
    """
    if lookup.status is LookupStatus.APPLIED:
        return Verdict(Action.SETTLE, "the receiver has the effect")
    if lookup.status is LookupStatus.UNSPECIFIED:
        return Verdict(Action.NOTE, f"lookup failed: {lookup.error}" if lookup.error else "lookup failed")
    if not operation.approved:
        return Verdict(Action.NOTE, "no approval on record; never re-driven")
    if key_retention is not None and operation.first_attempt_at is not None:
        age = now - operation.first_attempt_at
        if age + redrive_margin >= key_retention:
            return Verdict(
                Action.ESCALATE,
                f"first attempt {age.total_seconds():.0f} s ago, beyond the receiver's key retention of "
                f"{key_retention.total_seconds():.0f} s: a re-drive could write a second effect",
            )
    if lookup.strong:
        why = "strong NOT_FOUND"
    elif operation.state is OperationState.APPROVED:
        why = "never attempted"
    else:
        return Verdict(Action.NOTE, "eventual NOT_FOUND is not authoritative (a replica may lag)")
    if not redrive_enabled:
        return Verdict(Action.NOTE, f"{why}; re-drive disabled")
    return Verdict(Action.REDRIVE, why)


def age_seconds(operation: OpenOperation, now: datetime) -> float:
    """Return how long the operation's effect has been open, in seconds (0 when no time is known)."""
    since = operation.open_since
    return 0.0 if since is None else max(0.0, (now - since).total_seconds())


@dataclass(frozen=True, slots=True)
class RedriveCounts:
    """How the re-drives of one pass ended."""

    committed: int = 0
    unknown: int = 0
    rejected: int = 0
    already_settled: int = 0
    failed: int = 0

    @property
    def total(self) -> int:
        """Re-drives attempted."""
        return self.committed + self.unknown + self.rejected + self.already_settled + self.failed


@dataclass(frozen=True, slots=True)
class PassSummary:
    """What one pass did and what it left open.

    ``still_unknown`` counts the examined operations whose effect is still not confirmed
    after the pass: UNKNOWN ones, and APPROVED ones that could not be driven. Their age runs
    from the decision. ``unknown_older_than_alert`` is how many of them are older than the
    alert threshold; a non-zero value is what makes the command exit 1.
    """

    examined: int
    settled: int
    already_settled: int
    redriven: RedriveCounts
    noted: int
    escalated: int
    lookup_failures: int
    still_unknown: int
    oldest_unknown_age_seconds: float | None
    unknown_older_than_alert: int
    alert_after_seconds: float
    duration_seconds: float
    completed: bool = True

    @property
    def alerting(self) -> bool:
        """True when some operation older than the alert threshold is still not confirmed."""
        return self.unknown_older_than_alert > 0

    @property
    def lookups_all_failed(self) -> bool:
        """True when the pass examined operations and no lookup of any of them reached the receiver:
        it learnt nothing, so it counts as a failed pass (receiver down, or refusing the reconciler)."""
        return self.examined > 0 and self.lookup_failures >= self.examined

    def as_json(self) -> dict[str, object]:
        """Return the summary as a JSON-ready dict (the --json output)."""
        return {
            "examined": self.examined,
            "settled": self.settled,
            "already_settled": self.already_settled,
            "redriven": self.redriven.total,
            "redrive_outcomes": {
                "committed": self.redriven.committed,
                "unknown": self.redriven.unknown,
                "rejected": self.redriven.rejected,
                "already_settled": self.redriven.already_settled,
                "failed": self.redriven.failed,
            },
            "noted": self.noted,
            "escalated": self.escalated,
            "lookup_failures": self.lookup_failures,
            "still_unknown": self.still_unknown,
            "oldest_unknown_age_seconds": self.oldest_unknown_age_seconds,
            "unknown_older_than_alert": self.unknown_older_than_alert,
            "alert_after_seconds": self.alert_after_seconds,
            "duration_seconds": round(self.duration_seconds, 3),
            "completed": self.completed,
        }


MAX_BATCH_SIZE = 1000  # the BatchLookup and BatchSettleOperations limit


@dataclass(frozen=True, slots=True)
class PassSettings:
    """The knobs of one pass; its defaults are the reconciler's settings' defaults (``reconciler.config``)."""

    grace: timedelta = timedelta(seconds=30)
    alert_after: timedelta = timedelta(seconds=300)
    batch_size: int = 500
    redrive_enabled: bool = True
    # The longest a re-drive may take to reach the receiver (the per-call timeout).
    redrive_margin: timedelta = timedelta(seconds=10)

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be 1 to {MAX_BATCH_SIZE:,} (the BatchLookup and BatchSettle limit)")
