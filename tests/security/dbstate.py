"""Whole-database snapshots: a refused call must leave every row of every table as it was."""

from __future__ import annotations

import sqlalchemy as sa

from decisionflow_server.storage import db

Snapshot = dict[str, list[tuple[object, ...]]]


def snapshot(database_url: str) -> Snapshot:
    """Every row of every table (migration bookkeeping included), in a stable order."""
    engine = db.create_engine(database_url, pool_size=1)
    try:
        with db.reading(engine) as conn:
            tables = sorted(sa.inspect(conn).get_table_names())
            return {
                table: sorted((tuple(row) for row in conn.execute(sa.text(f'SELECT * FROM "{table}"'))), key=repr)
                for table in tables
            }
    finally:
        engine.dispose()


def row_counts(state: Snapshot) -> dict[str, int]:
    """Rows per table of a snapshot, for readable assertion messages."""
    return {table: len(rows) for table, rows in state.items()}
