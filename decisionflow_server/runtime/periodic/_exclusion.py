"""One runner of a job at a time across the processes on one database: a lock named by the job,
tried (never waited for) before each run and released after it.

- PostgreSQL: a session advisory lock (``pg_try_advisory_lock``) on a connection of the engine's pool
  held for the run; the key is the first 8 bytes of the SHA-256 of ``decisionflow.periodic.<name>``,
  apart from every transaction lock the stores take. A connection that cannot be unlocked is
  invalidated, never returned to the pool still holding the lock; the server drops the lock with
  the session if the process dies.
- SQLite: an advisory file lock (``flock``) on ``<database>-periodic-<name>``, as the write turn
  does (``decisionflow_server.storage.db.WriteTurn``): the worker processes of one host, and two
  runners in one process, exclude each other; the kernel drops it with the process. An in-memory
  database has one process: always held.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from decisionflow_server.storage import db
from decisionflow_server.storage.transactions import reachable


class Held(Protocol):
    """A job's lock, held until released."""

    def release(self) -> None:
        """Release the lock (blocking; called in a worker thread)."""
        ...


class Exclusion(Protocol):
    """Who may run a job now."""

    def try_hold(self) -> Held | None:
        """Hold the job's lock and return it, or None when another runner holds it (blocking; called in
        a worker thread)."""
        ...


def lock_key(name: str) -> int:
    """The PostgreSQL advisory lock key of the job name: a signed 64-bit integer."""
    return int.from_bytes(hashlib.sha256(f"decisionflow.periodic.{name}".encode()).digest()[:8], "big", signed=True)


class _AlwaysHeld:
    def release(self) -> None:
        pass


class _SessionLock:
    def __init__(self, connection: sa.Connection, key: int) -> None:
        self._connection = connection
        self._key = key

    def release(self) -> None:
        try:
            self._connection.execute(sa.select(sa.func.pg_advisory_unlock(self._key)))
            self._connection.commit()
        except Exception:
            # A session that cannot say unlock may still hold it: closing the session drops the lock,
            # and the connection never goes back to the pool.
            self._connection.invalidate()
        finally:
            self._connection.close()


class _PostgresExclusion:
    def __init__(self, engine: Engine, name: str, database: str) -> None:
        self._engine = engine
        self._key = lock_key(name)
        self._database = database

    def try_hold(self) -> Held | None:
        with reachable(self._database):
            connection = self._engine.connect()
            try:
                held = connection.execute(sa.select(sa.func.pg_try_advisory_lock(self._key))).scalar_one()
                # A session lock outlives the transaction; ending it keeps the connection from idling in one.
                connection.commit()
            except BaseException:
                connection.invalidate()
                connection.close()
                raise
        if not held:
            connection.close()
            return None
        return _SessionLock(connection, self._key)


class _FileLock:
    def __init__(self, descriptor: int) -> None:
        self._descriptor = descriptor

    def release(self) -> None:
        os.close(self._descriptor)  # closing the only descriptor of the open file drops its flock


class _SqliteExclusion:
    def __init__(self, database: str | None, name: str) -> None:
        in_memory = not database or database == ":memory:"
        self._path = None if in_memory else f"{database}-periodic-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}"

    def try_hold(self) -> Held | None:
        if self._path is None:
            return _AlwaysHeld()
        descriptor = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return None
        except BaseException:
            os.close(descriptor)
            raise
        return _FileLock(descriptor)


def single_runner(engine: Engine, name: str, *, database: str) -> Exclusion:
    """The lock that lets one runner of the job name run at a time on engine's database; a database that
    cannot answer while it is tried raises ``Unavailable`` naming database (e.g. ``orchestrator``)."""
    if db.is_sqlite(engine):
        return _SqliteExclusion(engine.url.database, name)
    if engine.dialect.name == "postgresql":
        return _PostgresExclusion(engine, name, database)
    raise ValueError(f"no single-runner lock for {engine.dialect.name} databases")
