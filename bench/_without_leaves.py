"""The orchestrator with its audit leaves left out: the baseline of ``python -m bench.audit_cost`` only.

Runs ``orchestrator.main`` after replacing, in this process alone, the two steps that make a leaf: building
its entry (encoding and hashing) and inserting it in the event's transaction. Every other statement, and the
schema, is the real orchestrator's. Never a way to run the service: its log would miss every event.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from decisionflow.vocabulary import CaseId, OperationId
from orchestrator import main
from orchestrator.audit import events
from orchestrator.store import _audit_entries

_NO_ENTRY = events.AuditEntry(b"", b"", "", OperationId(""), CaseId(""), datetime(2000, 1, 1, tzinfo=UTC))


def _no_entry(cls: type[events.AuditEntry], leaf: object, kind: str, case_id: CaseId) -> events.AuditEntry:
    return _NO_ENTRY


def _no_insert(conn: object, *entries: events.AuditEntry) -> None:
    return None


if __name__ == "__main__":
    events.AuditEntry.of = classmethod(_no_entry)  # type: ignore[method-assign, assignment]
    _audit_entries.append_txn = _no_insert
    sys.exit(main.main())
