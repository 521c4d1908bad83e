"""Transactions on the orchestrator's database: one writer at a time per SQLite process, and a
database that cannot answer reported as ``Unavailable`` (retry with the same request)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from decisionflow import db
from decisionflow.errors import Unavailable
from decisionflow.group_commit import GroupCommit

T = TypeVar("T")


class Transactions:
    """Opens the store's write and read transactions on one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # SQLite runs one write transaction at a time: writers of this process and of the
        # service's other workers take turns (db.WriteTurn) rather than sleep in the busy handler.
        self._write_turn = db.write_turn(engine)
        # On SQLite, writes of the hot paths share commits (decisionflow.group_commit). PostgreSQL
        # runs this process's writers in parallel and groups its own WAL flushes; a shared
        # transaction there would hold row locks of unrelated operations together.
        self.group = GroupCommit(engine, self._write_turn) if db.is_sqlite(engine) else None
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

    def batched(self, work: Callable[[sa.Connection], T]) -> T:
        """Run work(conn) in one write transaction, committed before this returns, that concurrent
        writers of this process may share (work runs in a savepoint of its own; see GroupCommit)."""
        try:
            if self.group is None:
                with self.engine.begin() as conn:
                    return work(conn)
            return self.group.run(work)
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
