"""The checkpoints table: sealed workflow checkpoints, written in the caller's transaction.

Sealing and verification live in ``orchestrator.checkpoints``; this module only stores rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler

from decisionflow_server.storage.transactions import Transactions
from orchestrator.domain import SealedCheckpoint
from orchestrator.schema import checkpoints
from orchestrator.store._rows import sealed_checkpoint_from


class _AsStoredText(sa.sql.functions.GenericFunction[Any]):
    """A text column of the seal; on SQLite its raw bytes (decoded, or refused, in Python), or NULL
    when a corrupt row keeps something other than text there."""

    name = "as_stored_text"
    inherit_cache = True


class _BlobOnly(sa.sql.functions.GenericFunction[Any]):
    """The state column, or NULL on SQLite when a corrupt row keeps something other than a BLOB there."""

    name = "blob_only"
    inherit_cache = True


@compiles(_AsStoredText)
@compiles(_BlobOnly)
def _column_itself(element: sa.sql.functions.GenericFunction[Any], compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.clauses, **kw)


# SQLite keeps any value in any column. Text that is not UTF-8 in a text column fails the driver's
# decoding (an OperationalError, answered as a database outage and retried for ever), and text in
# the state column would be read as str. Read them so that verification refuses the row instead.
@compiles(_AsStoredText, "sqlite")
def _text_bytes_or_null(element: _AsStoredText, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"CASE WHEN typeof({column}) = 'text' THEN CAST({column} AS BLOB) END"


@compiles(_BlobOnly, "sqlite")
def _blob_or_null(element: _BlobOnly, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"CASE WHEN typeof({column}) = 'blob' THEN {column} END"


_INSERT = checkpoints.insert()  # built once (see orchestrator.store._statements)


def checkpoint_columns(prefix: str = "") -> list[sa.ColumnElement[Any]]:
    """The checkpoints table's columns for a select read by ``sealed_checkpoint_from``, labelled with prefix.

    The seal's columns (key id, MAC, state) are read so that a corrupt value reaches verification,
    which refuses it as an integrity failure, instead of failing the read.
    """
    wrapped = {"key_id": _AsStoredText, "mac": _AsStoredText, "state": _BlobOnly}
    return [(wrapped[c.name](c) if c.name in wrapped else c).label(prefix + c.name) for c in checkpoints.c]


class CheckpointTable:
    """SQL access to the checkpoints table."""

    def __init__(self, transactions: Transactions) -> None:
        self._transactions = transactions

    def insert_txn(self, conn: sa.Connection, rows: Sequence[SealedCheckpoint]) -> None:
        """Insert sealed checkpoints inside the caller's transaction."""
        if rows:
            conn.execute(
                _INSERT,
                [
                    {
                        "checkpoint_id": r.checkpoint_id,
                        "workflow_name": r.workflow_name,
                        "graph_signature": r.graph_signature,
                        "operation_id": r.operation_id,
                        "created_at": r.created_at,
                        "key_id": r.key_id,
                        "mac": r.mac,
                        "state": r.state,
                    }
                    for r in rows
                ],
            )

    def get(self, checkpoint_id: str) -> SealedCheckpoint | None:
        """Return the stored checkpoint with that id, still sealed."""
        with self._transactions.read() as conn:
            statement = sa.select(*checkpoint_columns()).where(checkpoints.c.checkpoint_id == checkpoint_id)
            row = conn.execute(statement).first()
        return None if row is None else sealed_checkpoint_from(row._mapping)
