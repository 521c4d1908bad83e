"""How the ops commands show operations: a table and a field list for people, JSON for scripts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from decisionflow.client import Decision, LookupStatus, OperationView
from decisionflow_cli._tables import duration, since
from decisionflow_cli.review._output import to_json

TABLE_COLUMNS = ("OPERATION", "CASE", "STATE", "DECISION", "ATTEMPTS", "AGE", "LAST LOOKUP")


def last_lookup(operation: OperationView, now: datetime) -> str:
    """Return the last lookup as ``NOT_FOUND/STRONG 5m ago``, ``failed 5m ago: reason``, or ``-``."""
    note = operation.last_lookup
    if note is None:
        return "-"
    ago = f"{duration(since(note.looked_up_at, now))} ago"
    if note.status is LookupStatus.UNSPECIFIED:
        return f"failed {ago}: {note.error}" if note.error else f"failed {ago}"
    return f"{note.status.value}/{note.consistency.value} {ago}"


def table_row(operation: OperationView, now: datetime) -> tuple[str, ...]:
    """Return the table's cells for one operation; age is the time since it entered its state."""
    decision = "-" if operation.decision is Decision.UNSPECIFIED else operation.decision.value
    return (
        operation.operation_id,
        operation.case_id,
        operation.state.value,
        decision,
        str(operation.attempts),
        duration(since(operation.updated_at, now)),
        last_lookup(operation, now),
    )


def as_json(operation: OperationView, now: datetime) -> dict[str, Any]:
    """Return every field of operation as JSON types, with its ages in seconds (null when unknown)."""

    def seconds(moment: datetime | None) -> float | None:
        span = since(moment, now)
        return None if span is None else round(span.total_seconds(), 3)

    return {
        **to_json(operation),
        "age_seconds": seconds(operation.updated_at),
        "seconds_since_decision": seconds(operation.decided_at),
        # Negative once the lease has passed; null with no lease.
        "lease_expires_in_seconds": (
            None
            if operation.attempt_lease is None or operation.attempt_lease.expires_at is None
            else round((operation.attempt_lease.expires_at - now).total_seconds(), 3)
        ),
    }


def _when(moment: datetime | None, now: datetime) -> str:
    return "-" if moment is None else f"{moment.isoformat()} ({duration(since(moment, now))} ago)"


def _expiry(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "-"
    if moment <= now:
        return f"{moment.isoformat()} (passed {duration(since(moment, now))} ago: the next re-drive may take it)"
    return f"{moment.isoformat()} (in {duration(moment - now)})"


def details(operation: OperationView, now: datetime) -> str:
    """Return every field of operation as ``name: value`` lines for people."""
    receipt = operation.receipt
    note = operation.last_lookup
    lease = operation.attempt_lease
    lines = [
        ("operation", operation.operation_id),
        ("case", operation.case_id),
        ("state", operation.state.value),
        ("updated", _when(operation.updated_at, now)),
        ("decision", "-" if operation.decision is Decision.UNSPECIFIED else operation.decision.value),
        ("reviewer", operation.reviewer or "-"),
        ("decided", _when(operation.decided_at, now)),
        ("attempts", str(operation.attempts)),
        ("first attempt", _when(operation.first_attempt_at, now)),
        ("receipt", "-" if receipt is None else receipt.receipt_id),
        ("applied", "-" if receipt is None else _when(receipt.applied_at, now)),
        ("lease holder", "-" if lease is None else lease.holder or "(not named)"),
        ("lease expires", "-" if lease is None else _expiry(lease.expires_at, now)),
        ("rejection reason", operation.rejection_reason or "-"),
        ("last lookup", "-" if note is None else last_lookup(operation, now)),
    ]
    if note is not None:
        lines += [
            ("  status", note.status.value),
            ("  consistency", note.consistency.value),
            ("  looked up", _when(note.looked_up_at, now)),
            ("  error", note.error or "-"),
        ]
    width = max(len(name) for name, _ in lines) + 1
    return "\n".join(f"{(name + ':').ljust(width)} {value}" for name, value in lines)
