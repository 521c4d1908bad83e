"""Run a service with every database round trip it makes written to a file: ``python -m bench._sql_trace
MODULE ARGS...`` runs ``python -m MODULE ARGS...`` with SQLAlchemy listeners installed first.

One JSON line per event, appended to the file named by ``BENCH_SQL_TRACE`` (every process of the
service appends to it): ``statement`` (the SQL as PostgreSQL receives it, parameters bound by
psycopg), ``commit``, ``rollback`` (an explicit one, or the pool's reset of a connection that was
inside a transaction), and ``ping`` (the ping the pool sends before handing out a connection that
sat idle: one statement in autocommit, which PostgreSQL counts as a committed transaction of its
own). Each line names its process and connection, so the statements of one transaction can be
grouped. For the scale plan only: the bound SQL costs CPU, so nothing measured for speed runs traced.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import time
from typing import IO, Any

import psycopg
import sqlalchemy as sa
from psycopg.pq import TransactionStatus
from sqlalchemy import event
from sqlalchemy.dialects.postgresql import _psycopg_common

TRACE_ENV = "BENCH_SQL_TRACE"


class _Trace:
    def __init__(self, path: str) -> None:
        self._lock = threading.Lock()
        self._path = path
        self._file: IO[str] | None = None
        self._pid = 0

    def write(self, kind: str, dbapi_connection: Any, sql: str = "") -> None:
        record: dict[str, object] = {
            "pid": os.getpid(),
            "conn": id(dbapi_connection),
            "kind": kind,
            "at": time.monotonic(),
        }
        if sql:
            record["sql"] = sql
        line = json.dumps(record) + "\n"
        with self._lock:
            if self._file is None or self._pid != os.getpid():  # a worker forked from the parent opens its own
                self._file = open(self._path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the process
                self._pid = os.getpid()
            self._file.write(line)
            self._file.flush()


def _bound(cursor: Any, statement: str, parameters: Any) -> str:
    if not isinstance(cursor.connection, psycopg.Connection):
        return statement
    return psycopg.ClientCursor(cursor.connection).mogrify(statement, parameters or None)


def install(trace: _Trace) -> None:
    """Record every statement, commit, rollback and pre-ping of every engine this process creates."""

    @event.listens_for(sa.engine.Engine, "before_cursor_execute")
    def _statement(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        dbapi_connection = cursor.connection
        for one in parameters if many else [parameters]:
            trace.write("statement", dbapi_connection, _bound(cursor, statement, one))

    @event.listens_for(sa.engine.Engine, "commit")
    def _commit(conn: sa.Connection) -> None:
        trace.write("commit", conn.connection.dbapi_connection)

    @event.listens_for(sa.engine.Engine, "rollback")
    def _rollback(conn: sa.Connection) -> None:
        trace.write("rollback", conn.connection.dbapi_connection)

    @event.listens_for(sa.pool.Pool, "reset")
    def _reset(dbapi_connection: Any, record: Any, state: Any) -> None:
        info = getattr(dbapi_connection, "info", None)
        if info is not None and getattr(info, "transaction_status", TransactionStatus.IDLE) != TransactionStatus.IDLE:
            trace.write("rollback", dbapi_connection)

    ping: Any = _psycopg_common._PGDialect_common_psycopg.do_ping

    def traced_ping(self: Any, dbapi_connection: Any) -> bool:
        trace.write("ping", dbapi_connection)
        return bool(ping(self, dbapi_connection))

    _psycopg_common._PGDialect_common_psycopg.do_ping = traced_ping  # type: ignore[method-assign]


def main() -> None:
    """Install the listeners, then run the service module given as the first argument as __main__."""
    install(_Trace(os.environ[TRACE_ENV]))
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
