"""Transactions on a service's own database, with one rule for a database that cannot answer.

Both stores (the orchestrator's and the receiver's) open every transaction here, so the same
outage reads the same on either service:

- **What counts as unavailable**: SQLAlchemy's ``OperationalError`` (connection refused, lost,
  database locked or full), ``InterfaceError`` (a connection the driver already closed) and
  ``TimeoutError`` (no pooled connection in time). Each says the database could not answer, not
  that the request was wrong: the store raises ``Unavailable`` (UNAVAILABLE on the wire) and the
  caller retries with the same key, which is safe because every write is keyed.
- **What the message says**: ``"<service> database unavailable: the database cannot answer: it is
  unreachable, busy or failing over (<driver error class>); the call may be retried with the same
  key after 1.000s"``, with a ``google.rpc.RetryInfo`` of that delay (``RETRY_AFTER``) and the same
  delay in ErrorInfo's ``retry_after``, as a budget refusal says when to come back. The driver's
  own text may name hosts, users, paths and SQL: it goes only to the server's log (a ``warning``
  line of ``decisionflow_server.storage.transactions`` per refused call). The one exception is a
  full disk, which an operator must act on and which is spelt out (``db.STORAGE_FULL_MESSAGE``).

SQLite runs one write transaction at a time: writers of this process and of the service's other
workers take turns (``db.WriteTurn``) rather than sleep in SQLite's busy handler, and on SQLite
the hot paths' writes share commits (``decisionflow_server.storage.group_commit``). PostgreSQL runs writers in
parallel and groups its own WAL flushes; a shared transaction there would hold row locks of
unrelated operations together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import timedelta
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from decisionflow import reasons
from decisionflow_server.foundation.errors import Unavailable, duration_text
from decisionflow_server.storage import db
from decisionflow_server.storage.group_commit import GroupCommit

T = TypeVar("T")
logger = logging.getLogger(__name__)

UNREACHABLE: tuple[type[Exception], ...] = (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError)
"""The errors that mean the database could not answer (retry with the same key)."""


RETRY_AFTER = timedelta(seconds=1)
"""How long a caller refused for an unavailable database waits before the same call again. A
failover takes about the cluster's ttl (20 s with the recommended settings), a lost connection one
reconnect: a second is short beside either, and spares a database coming back a retry storm."""


def unavailable_detail(exc: BaseException) -> str:
    """What a caller is told of a database error: the full disk, else that the database cannot be
    reached or is failing over, with only the driver's error class and when to retry."""
    cause = getattr(exc, "orig", None) or exc
    if db.storage_full(cause):
        return db.STORAGE_FULL_MESSAGE
    return (
        f"the database cannot answer: it is unreachable, busy or failing over ({type(cause).__name__}); "
        f"the call may be retried with the same key after {duration_text(RETRY_AFTER)}"
    )


@contextmanager
def reachable(database: str) -> Iterator[None]:
    """Turn an error of ``UNREACHABLE`` raised in the block into ``Unavailable`` naming database."""
    try:
        yield
    except UNREACHABLE as exc:
        logger.warning("%s database unavailable: %s", database, getattr(exc, "orig", None) or exc)
        raise Unavailable(
            f"{database} database unavailable: {unavailable_detail(exc)}",
            metadata={reasons.RETRY_AFTER: duration_text(RETRY_AFTER)},
            retry_after=RETRY_AFTER,
        ) from exc


class Transactions:
    """Opens one service's write and read transactions on one engine."""

    def __init__(self, engine: Engine, *, database: str) -> None:
        self.engine = engine
        self.database = database
        self._write_turn = db.write_turn(engine)
        self.group = GroupCommit(engine, self._write_turn) if db.is_sqlite(engine) else None
        # PostgreSQL aborts the whole transaction on a constraint violation, so a statement whose
        # violation is an answer runs in a savepoint there; SQLite fails only the statement (and a
        # savepoint would cost two more statements, compiled afresh each time).
        self._needs_savepoint = not db.is_sqlite(engine)

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        """One write transaction: committed when the block ends, rolled back if it raises."""
        with reachable(self.database), self._write_turn, self.engine.begin() as conn:
            yield conn

    def batched(self, work: Callable[[sa.Connection], T]) -> T:
        """Run work(conn) in one write transaction, committed before this returns, that concurrent
        writers of this process may share (work runs in a savepoint of its own; see GroupCommit)."""
        with reachable(self.database):
            if self.group is None:
                with self._write_turn, self.engine.begin() as conn:
                    return work(conn)
            return self.group.run(work)

    @contextmanager
    def read(self, *, one_snapshot: bool = False) -> Iterator[sa.Connection]:
        """One read-only transaction (on SQLite a snapshot that does not queue behind writers);
        one_snapshot: every statement in it reads the same snapshot on PostgreSQL too."""
        with reachable(self.database), db.reading(self.engine, one_snapshot=one_snapshot) as conn:
            yield conn

    def savepoint_txn(self, conn: sa.Connection) -> AbstractContextManager[object]:
        """Guard one statement whose constraint violation the caller answers, keeping conn usable."""
        return conn.begin_nested() if self._needs_savepoint else nullcontext()
