"""The audit log's entries, written in the transaction of the event they record (joining the caller's).

An entry is inserted without an index: the sequencer gives it one later (``_audit_tree``). The
insert shares the event's fate: the event's transaction rolled back, the entry is gone with it; the
insert failing, the event's transaction fails.

On PostgreSQL a first Approve's two leaves (its decision, its receipt) ride on the statement that records
the event: the UPDATE of the operation becomes a data-modifying CTE, and the entry is inserted from its
RETURNING, so only when the update changed the row (``with_entry``). A separate insert there is a round
trip of its own, about 100 µs of the orchestrator's CPU (``python -m bench.audit_cost``, the store's writes
in process, two runs each: the two leaves of a first Approve took 133 and 270 µs as inserts of their own,
1.8 and 3.9 % of its CPU, and 45 and 50 µs riding on the updates, 0.6 and 0.9 %). SQLite's WITH holds no
INSERT, and its inserts are calls in process: there every entry is its own statement (``append_txn``).
"""

from __future__ import annotations

import sqlalchemy as sa

from decisionflow.transparency import Leaf
from decisionflow_server.storage.db import UtcDateTime
from orchestrator.audit_log.events import AuditEntry, encoded
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


def in_statement(conn: sa.Connection) -> bool:
    """Whether the event's own statement inserts its entry (a ``with_entry`` statement, PostgreSQL) rather
    than ``append_txn`` after it (SQLite)."""
    return conn.dialect.name == "postgresql"


def with_entry(update: sa.Update, kind: str) -> sa.Select[tuple[object, ...]]:
    """update (of one operation, RETURNING its row, with ``operation_id`` and ``case_id``) as one PostgreSQL
    statement that returns the same rows and inserts, iff the update returns the row, the entry of that
    operation's leaf of kind, bound with ``entry_values``. The entry's operation and case ids are the row's."""
    changed = update.cte("changed")
    entry = audit_entries.insert().from_select(
        ["leaf", "leaf_hash", "kind", "operation_id", "case_id", "recorded_at"],
        sa.select(
            sa.bindparam("b_leaf", type_=audit_entries.c.leaf.type),
            sa.bindparam("b_leaf_hash", type_=audit_entries.c.leaf_hash.type),
            sa.literal(kind, audit_entries.c.kind.type),
            changed.c.operation_id,
            changed.c.case_id,
            sa.bindparam("b_leaf_at", type_=UtcDateTime()),
        ).select_from(changed),
    )
    return sa.select(changed).add_cte(entry.cte("entry"))


def entry_values(leaf: Leaf) -> dict[str, object]:
    """The parameters of a ``with_entry`` statement that write leaf."""
    data, digest = encoded(leaf)
    return {"b_leaf": data, "b_leaf_hash": digest, "b_leaf_at": leaf.recorded_at}
