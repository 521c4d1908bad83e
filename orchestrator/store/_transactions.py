"""Transactions on the orchestrator's database: one writer at a time per SQLite process, and a
database that cannot answer reported as ``Unavailable`` (retry with the same request)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from decisionflow import db
from decisionflow.errors import Unavailable


class Transactions:
    """Opens the store's write and read transactions on one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # SQLite runs one write transaction at a time (BEGIN IMMEDIATE). Threads of this process
        # that find the write lock taken would wait in SQLite's busy handler, which sleeps in
        # steps of up to 100 ms; queueing them on a lock here hands the database over at once.
        # Other processes on the same file still wait through the busy timeout.
        self._write_turn: AbstractContextManager[object] = threading.Lock() if db.is_sqlite(engine) else nullcontext()
        # PostgreSQL aborts the whole transaction on a constraint violation, so a statement whose
        # violation is an answer runs in a savepoint there; SQLite fails only the statement.
        self._needs_savepoint = not db.is_sqlite(engine)

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        """One write transaction: committed when the block ends, rolled back if it raises."""
        try:
            with self._write_turn, self.engine.begin() as conn:
                yield conn
        except OperationalError as exc:
            raise Unavailable(f"database unavailable: {exc.orig}") from exc

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """One read-only snapshot (on SQLite it does not queue behind writers)."""
        try:
            with db.reading(self.engine) as conn:
                yield conn
        except OperationalError as exc:
            raise Unavailable(f"database unavailable: {exc.orig}") from exc

    def savepoint_txn(self, conn: sa.Connection) -> AbstractContextManager[object]:
        """Guard one statement whose constraint violation the caller answers, keeping conn usable."""
        return conn.begin_nested() if self._needs_savepoint else nullcontext()
