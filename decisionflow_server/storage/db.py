"""Database engines and migrations shared by the services (each service owns its database).

SQLite files run in WAL mode with ``synchronous=FULL`` (a committed effect survives power
loss) and a busy timeout; PostgreSQL is reached through psycopg 3. Schemas are Alembic
migrations, each service with its own version table so two services may share one
PostgreSQL database in a test without stepping on each other, and with it a compatibility record
(decisionflow_server.storage.schema_compatibility) that ``migrate`` writes in the same transaction.
"""

from __future__ import annotations

import fcntl
import os
import select
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Dialect, Engine

from decisionflow_server.storage import schema_compatibility

if TYPE_CHECKING:
    from alembic.config import Config

SQLITE_BUSY_TIMEOUT_MS = 10_000
_READ_ONLY = "decisionflow_read_only"
_FILE_IDENTITY = "decisionflow_file_identity"
_IDLE_SINCE = "decisionflow_idle_since"
PING_AFTER_IDLE_SECONDS = 1.0
"""A pooled PostgreSQL connection idle this long is pinged before use (see ``_ping_after_idle``)."""


def normalise_url(url: str) -> str:
    """Return a SQLAlchemy URL: ``postgresql://`` becomes ``postgresql+psycopg://``, several hosts
    (``postgresql://u@h1:p1,h2:p2/db``, as libpq writes them) become one ``host=`` query parameter
    each, as SQLAlchemy takes them; a bare path is SQLite."""
    for scheme in ("postgresql://", "postgres://", "postgresql+psycopg://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + _hosts_as_parameters(url[len(scheme) :])
    if "://" not in url:
        return "sqlite:///" + str(Path(url).resolve())
    return url


def _hosts_as_parameters(rest: str) -> str:
    """``user@h1:p1,h2:p2/db?x=y`` → ``user@/db?x=y&host=h1:p1&host=h2:p2``; one host is left as it is."""
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc, tail = rest[:end], rest[end:]
    user, at, hosts = netloc.rpartition("@")
    if "," not in hosts:
        return rest
    path, question, query = tail.partition("?")
    parameters = "&".join(f"host={host}" for host in hosts.split(",") if host)
    return f"{user}{at}{path or '/'}?{query + '&' if question and query else ''}{parameters}"


def _file_identity(database: str | None) -> tuple[int, int] | None:
    """The device and inode of a SQLite database file, or None (in memory, or not reachable)."""
    if not database or database == ":memory:":
        return None
    try:
        status = os.stat(database)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _enter_wal(cursor: Any) -> None:
    # Switching a new file to WAL needs a moment alone with it, and SQLite answers "database is
    # locked" at once, without its busy handler, while another connection is opening it too
    # (replicas starting together): wait as a busy handler would.
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def create_engine(url: str, *, pool_size: int = 10) -> Engine:
    """Return an engine for url with the project's durability settings applied to every connection."""
    url = normalise_url(url)
    if url.startswith("sqlite"):
        database = sa.make_url(url).database
        engine = sa.create_engine(
            url,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
            pool_size=pool_size,
            max_overflow=pool_size,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, record: Any) -> None:
            # Let SQLAlchemy issue BEGIN itself (IMMEDIATE below) rather than pysqlite's
            # deferred implicit transactions, so writers queue on the busy timeout
            # instead of failing with "database is locked" on upgrade.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            _enter_wal(cursor)
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()
            record.info[_FILE_IDENTITY] = _file_identity(database)

        @event.listens_for(engine, "checkout")
        def _sqlite_same_file(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
            # An open SQLite connection keeps using the file it opened after that file is deleted or
            # replaced, or its directory moved or locked: its commits would land where no later
            # connection looks. The pool discards it and reconnects, which then fails (UNAVAILABLE)
            # or finds the file that is there now.
            if _file_identity(database) != record.info.get(_FILE_IDENTITY):
                raise sa.exc.DisconnectionError("the SQLite database file was moved, replaced or made unreachable")

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: sa.Connection) -> None:
            # Readers (see ``reading``) take a deferred snapshot and never wait for writers.
            begin = "BEGIN" if conn.get_execution_options().get(_READ_ONLY) else "BEGIN IMMEDIATE"
            # Straight to the driver: through SQLAlchemy's execution this one statement cost more
            # than the rest of a transaction's opening and commit together. Its error is wrapped as
            # SQLAlchemy would wrap it (a busy or full database: OperationalError, so UNAVAILABLE).
            try:
                conn.connection.driver_connection.execute(begin)  # type: ignore[union-attr]  # checked out: never None
            except sqlite3.Error as exc:
                raise sa.exc.DBAPIError.instance(begin, (), exc, sqlite3.Error) from exc

        return engine
    engine = sa.create_engine(url, pool_size=pool_size, max_overflow=pool_size)
    event.listen(engine, "connect", _refuse_other_encodings, insert=True)
    _ping_after_idle(engine, PING_AFTER_IDLE_SECONDS)
    return engine


class UnsupportedDatabase(Exception):
    """The database cannot hold what the services store as they store it."""


def _refuse_other_encodings(dbapi_connection: Any, _record: Any) -> None:
    # A database created without a UTF-8 locale (SQL_ASCII, LATIN1, ...) would store text the services
    # never read back as written; under SQL_ASCII the driver even returns text as bytes. Refused on the
    # first connection, before any statement, with what to do.
    encoding = dbapi_connection.info.parameter_status("server_encoding")
    if encoding != "UTF8":
        name = dbapi_connection.info.dbname
        raise UnsupportedDatabase(
            f"the PostgreSQL database {name!r} is encoded {encoding}, not UTF8: create it with ENCODING 'UTF8' "
            "(CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0, or a cluster initialised with a UTF-8 locale)"
        )


def _ping_after_idle(engine: Engine, idle_seconds: float) -> None:
    """Ping a pooled connection before handing it out when it has sat in the pool idle_seconds or
    more, or when the server has written to it while it sat there.

    A connection a server or a network dropped while it sat idle (a restart, a failover, an idle
    timeout) is found by the ping and replaced before a transaction uses it. SQLAlchemy's
    ``pool_pre_ping`` pings at every checkout instead: on a busy service that is one more round trip
    and one more transaction on the primary for each of ours (a first Approve checks out four
    connections, so a review cost the primary 12 transactions, 6 of them pings).

    A connection used less than idle_seconds ago is pinged only if its socket is readable: between
    transactions the server sends nothing unless it is ending the session (the FATAL message of a
    terminated backend or a shutdown, then end of file), so a backend terminated in that moment is
    replaced too, at the cost of one poll(2) per checkout. What the poll cannot see is a server that
    goes away without a word (a host gone, a network cut); a transaction on such a connection fails
    like any in flight when it went (UNAVAILABLE, retried with the same key), and SQLAlchemy
    replaces every older connection of the pool at once.
    """

    @event.listens_for(engine, "checkin")
    def _idle_since(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is None:
            return  # a new connection
        just_used = time.monotonic() - idle_since < idle_seconds
        if just_used and not _server_wrote(dbapi_connection, engine.dialect.loaded_dbapi.Error):
            return  # one just used, with nothing from the server since
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            if engine.dialect.is_disconnect(exc, dbapi_connection, None):
                # The pool discards this connection and checks out another (up to three times).
                raise sa.exc.DisconnectionError(f"pooled connection dropped while idle: {type(exc).__name__}") from exc
            raise


def _server_wrote(dbapi_connection: Any, driver_error: type[Exception]) -> bool:
    """Whether the server has sent anything to a connection that no statement is waiting on."""
    try:
        descriptor = dbapi_connection.fileno()
    except driver_error:  # a connection the driver has closed: the ping says so
        return True
    poller = select.poll()
    poller.register(descriptor, select.POLLIN)
    return bool(poller.poll(0))


@contextmanager
def reading(engine: Engine, *, one_snapshot: bool = False) -> Iterator[sa.Connection]:
    """A connection for reads only: on SQLite a deferred transaction (a WAL snapshot that does not
    queue behind writers, held from its first read to its end); elsewhere a plain connection, whose
    every statement sees its own snapshot unless one_snapshot asks for one the whole transaction
    reads from (REPEATABLE READ: a page and its count agree)."""
    options: dict[str, object] = {_READ_ONLY: True}
    if one_snapshot and not is_sqlite(engine):
        options["isolation_level"] = "REPEATABLE READ"
    with engine.connect() as conn:
        yield conn.execution_options(**options)


class WriteTurn:
    """The turn to write one SQLite file: this process's threads queue on a lock, and the processes
    on the file (the workers of a service) on an advisory lock (flock) on ``<database>-turn``.

    SQLite runs one write transaction at a time (BEGIN IMMEDIATE). A writer that finds it taken
    waits in SQLite's busy handler, which sleeps in steps of up to 100 ms; queued on these locks
    instead, the next writer starts the moment the last one commits. Correctness never rests on
    the turn: SQLite's own locking does that, and a writer that does not take the turn (another
    program, or this one when the turn file cannot be opened) still waits in the busy handler.
    """

    def __init__(self, database: str | None) -> None:
        self._threads = threading.Lock()
        self._path = f"{database}-turn" if database and database != ":memory:" else None
        self._fd: int | None = None
        self._fd_pid = 0  # a descriptor inherited across fork shares its lock with the parent: reopen

    def _descriptor(self) -> int | None:
        if self._path is None:
            return None
        if self._fd is None or self._fd_pid != os.getpid():
            try:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                return None  # a full disk or a read-only directory: the busy handler still orders writers
            self._fd_pid = os.getpid()
        return self._fd

    def __enter__(self) -> WriteTurn:
        self._threads.acquire()
        try:
            fd = self._descriptor()
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # as above: SQLite's busy handler orders the writers
        except BaseException:
            self._threads.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._fd is not None and self._fd_pid == os.getpid():
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        except OSError:
            pass
        finally:
            self._threads.release()


def write_turn(engine: Engine) -> AbstractContextManager[object]:
    """The write turn of engine's database: a WriteTurn on SQLite; none elsewhere (PostgreSQL runs
    writers in parallel)."""
    if not is_sqlite(engine):
        return nullcontext()
    return WriteTurn(engine.url.database)


# SQLite's SQLITE_FULL and PostgreSQL's disk_full (SQLSTATE 53100): the write did not happen,
# and it will succeed again once space returns, without a restart.
_SQLITE_FULL = 13
_PG_DISK_FULL = "53100"
STORAGE_FULL_MESSAGE = "database or disk is full"


def storage_full(cause: BaseException) -> bool:
    """Return True when cause (a DB-API error) says the database's storage is full."""
    if getattr(cause, "sqlite_errorcode", None) == _SQLITE_FULL:
        return True
    return getattr(cause, "sqlstate", None) == _PG_DISK_FULL


def is_sqlite(engine: Engine) -> bool:
    """Return True when engine talks to SQLite."""
    return engine.dialect.name == "sqlite"


def alembic_config(script_location: Path, version_table: str) -> Config:
    """Return the Alembic configuration of one service's migrations and version table."""
    # Alembic (and the Mako and Pygments it pulls in) is imported only when a schema is read or migrated:
    # a server starting on a database already at its head never needs it (decisionflow_server.storage.migrating).
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location))
    config.attributes["version_table"] = version_table
    return config


def current_revision(connection: sa.Connection, version_table: str) -> str | None:
    """Return the schema revision recorded in version_table, None when the database has none."""
    # Read directly rather than through Alembic's MigrationContext, which logs at INFO on every use:
    # a refusal to start must stay one line.
    if not sa.inspect(connection).has_table(version_table):
        return None
    versions = connection.execute(sa.select(sa.table(version_table, sa.column("version_num")))).scalars().all()
    return ",".join(sorted(versions)) or None


def migrate(engine: Engine, script_location: Path, version_table: str) -> tuple[str | None, str | None]:
    """Bring the database behind engine to the newest schema revision (idempotent) and write its compatibility
    record in the same transaction; return the revisions before and after, read under the same lock. A
    database at a revision these migrations do not ship (a newer release migrated it) is left as it is:
    before and after are that revision."""
    from alembic import command
    from alembic.script import ScriptDirectory

    config = alembic_config(script_location, version_table)
    scripts = ScriptDirectory.from_config(config)
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Replicas starting together on one database take turns; the first migrates.
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:table))"), {"table": version_table})
        before = current_revision(connection, version_table)
        if before is not None and before not in schema_compatibility.shipped(scripts):
            # Never downgraded: whether this release may run on it is the caller's decision
            # (decisionflow_server.storage.migrating).
            return before, before
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        after = current_revision(connection, version_table)
        if after is not None and after != before:
            schema_compatibility.write(connection, version_table, schema_compatibility.oldest_of(scripts, after))
        return before, after


class UtcDateTime(sa.types.TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back as an aware UTC datetime, on every backend.

    The SQL type is ``DateTime(timezone=True)``, as the migrations create it; SQLite keeps no
    zone, so the UTC wall clock is stored there and the zone re-attached on the way out.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Store value as UTC; a naive time is refused since its zone cannot be known."""
        if value is None:
            return None
        if value.utcoffset() is None:
            raise ValueError("naive datetime refused: give a timezone")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        """Return the stored time as an aware UTC datetime."""
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
