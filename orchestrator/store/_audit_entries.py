"""The audit log's entries, written in the transaction of the event they record (joining the caller's).

An entry is inserted without an index: the sequencer gives it one later (``_audit_sequencing``). The
insert shares the event's fate: the event's transaction rolled back, the entry is gone with it; the
insert failing, the event's transaction fails.
"""

from __future__ import annotations

import sqlalchemy as sa

from orchestrator.audit.events import AuditEntry
from orchestrator.schema import audit_entries

# Built once (see orchestrator.store._statements). No RETURNING of the new entry id, which nothing reads:
# on PostgreSQL it is a result set more to fetch for each leaf.
_INSERT_ENTRY = audit_entries.insert().inline()


def _values(entry: AuditEntry) -> dict[str, object]:
    return {
        "leaf": entry.data,
        "leaf_hash": entry.hash,
        "kind": entry.kind,
        "operation_id": entry.operation_id,
        "case_id": entry.case_id,
        "recorded_at": entry.recorded_at,
    }


def append_txn(conn: sa.Connection, *entries: AuditEntry) -> None:
    """Insert the entries in the order given (their entry ids ascend in that order)."""
    # One statement per row: a multi-row INSERT need not number its rows in their order.
    for entry in entries:
        conn.execute(_INSERT_ENTRY, _values(entry))
