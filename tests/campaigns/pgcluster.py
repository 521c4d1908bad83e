"""PostgreSQL servers owned by one test: a standalone server to restart, or a primary with a streaming replica.

The machine's own PostgreSQL is shared with other tests, so a campaign that restarts a server or
pauses a replica's replay makes its own: ``initdb`` in a temporary folder, a free loopback port,
trust authentication (loopback only), and ``pg_basebackup -R`` for a replica that streams from
the primary. PostgreSQL refuses to run as root, so under root its commands run as the
``postgres`` OS user. Without the binaries the tests skip with the reason, or fail when
``DECISIONFLOW_REQUIRE_POSTGRES=1``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from decisionflow_server.foundation.processes import free_port

BIN_ENV = "DECISIONFLOW_TEST_POSTGRES_BIN"
OS_USER = "postgres"
COMMAND_TIMEOUT_SECONDS = 120.0
CATCH_UP_TIMEOUT_SECONDS = 60.0
SERVER_SETTINGS = (
    "listen_addresses = '127.0.0.1'",
    "unix_socket_directories = ''",
    "wal_level = replica",
    "max_wal_senders = 5",
    "hot_standby = on",
    "max_connections = 200",
    "logging_collector = off",
)
HBA = (
    "host all all 127.0.0.1/32 trust",
    "host replication all 127.0.0.1/32 trust",
)


def _bindir() -> Path | None:
    given = os.environ.get(BIN_ENV)
    if given:
        return Path(given)
    found = shutil.which("initdb")
    if found:
        # Distributions link a few programs into PATH; the rest (pg_basebackup) sit beside the real one.
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    return versions[0].parent if versions else None


def _unavailable(reason: str) -> None:
    if os.environ.get("DECISIONFLOW_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL binaries required: {reason}")
    pytest.skip(reason)


def _as_server_user() -> list[str]:
    """The command prefix that runs PostgreSQL's programs as a user they accept (never root)."""
    return ["runuser", "-u", OS_USER, "--"] if os.geteuid() == 0 else []


@dataclass
class PgServer:
    """One PostgreSQL server in its own data folder on a fixed loopback port."""

    bindir: Path
    datadir: Path
    port: int
    name: str

    @property
    def logfile(self) -> Path:
        """The server's log (pg_ctl -l)."""
        return self.datadir.parent / f"{self.name}.log"

    def url(self, database: str = "postgres") -> str:
        """A URL for database on this server (the postgres superuser, trust authentication)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def run(self, program: str, *args: str) -> str:
        """Run one of the server's programs as the server's OS user; return stdout, raise with stderr on failure."""
        argv = [*_as_server_user(), str(self.bindir / program), *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SECONDS, check=False)
        if done.returncode != 0:
            log = self.logfile.read_text(errors="replace")[-3000:] if self.logfile.exists() else ""
            raise AssertionError(f"{program} {' '.join(args)} exited {done.returncode}:\n{done.stderr}\n{log}")
        return done.stdout

    def configure(self, extra: Sequence[str] = ()) -> None:
        """Append the loopback, port and replication settings (later lines win) and the trust rules."""
        settings = [*SERVER_SETTINGS, f"port = {self.port}", *extra]
        with (self.datadir / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n" + "\n".join(settings) + "\n")
        (self.datadir / "pg_hba.conf").write_text("\n".join(HBA) + "\n", encoding="utf-8")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self.run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.datadir), "-l", str(self.logfile))
        self.wait_ready()

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (fast: roll back and disconnect; immediate: no shutdown checkpoint, as a crash)."""
        self.run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.datadir))

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m mode``: every connection is cut; the server is back on the same port."""
        self.run("pg_ctl", "restart", "-w", "-t", "60", "-m", mode, "-D", str(self.datadir), "-l", str(self.logfile))
        self.wait_ready()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until a connection succeeds (a replica accepts read-only connections once consistent)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def query(self, sql: str, params: Sequence[Any] = (), database: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one statement in autocommit; return its rows (empty for a statement without any)."""
        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description else []

    def size_bytes(self, database: str) -> int:
        """pg_database_size of database."""
        return int(self.query("SELECT pg_database_size(%s)", (database,))[0][0])


@dataclass
class StreamingPair:
    """A primary and a hot-standby replica streaming its WAL."""

    primary: PgServer
    replica: PgServer

    def create_database(self, name: str) -> tuple[str, str]:
        """Create a database on the primary; return its URL on the primary and on the replica."""
        self.primary.query(f'CREATE DATABASE "{name}"')
        return self.primary.url(name), self.replica.url(name)

    def pause_replay(self) -> None:
        """Stop applying WAL on the replica (it keeps receiving it): its reads stay where they are."""
        self.replica.query("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        """Apply WAL on the replica again."""
        self.replica.query("SELECT pg_wal_replay_resume()")

    def lag_bytes(self) -> int:
        """How far the replica's replayed WAL is behind the primary's current position."""
        (current,) = self.primary.query("SELECT pg_current_wal_lsn()::text")[0]
        (lag,) = self.replica.query("SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn())", (current,))[0]
        return max(0, int(lag))

    def wait_caught_up(self, timeout: float = CATCH_UP_TIMEOUT_SECONDS) -> float:
        """Wait until the replica replayed everything the primary had written when called; return seconds waited."""
        began = time.monotonic()
        (target,) = self.primary.query("SELECT pg_current_wal_lsn()::text")[0]
        while True:
            (behind,) = self.replica.query("SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn())", (target,))[0]
            if int(behind) <= 0:
                return time.monotonic() - began
            if time.monotonic() - began > timeout:
                raise AssertionError(f"the replica is still {behind} bytes behind after {timeout} s")
            time.sleep(0.05)


@contextmanager
def _workdir() -> Iterator[Path]:
    # pytest's tmp_path lives under a root-only folder the server's OS user cannot enter.
    root = Path(tempfile.mkdtemp(prefix="decisionflow-pg-"))
    try:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(OS_USER)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _initdb(bindir: Path, root: Path, name: str) -> PgServer:
    server = PgServer(bindir, root / name, free_port(), name)
    server.run("initdb", "-D", str(server.datadir), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions")
    server.configure()
    return server


def _binaries() -> Path:
    bindir = _bindir()
    if bindir is None or not (bindir / "initdb").exists():
        _unavailable(f"no PostgreSQL binaries (initdb) found; set {BIN_ENV}")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(OS_USER)
        except KeyError:
            _unavailable(f"running as root without a {OS_USER!r} OS user to run PostgreSQL as")
    assert bindir is not None
    return bindir


def _stop_quietly(server: PgServer) -> None:
    # Not running (or already gone) is fine: the folder is removed either way.
    with suppress(AssertionError, subprocess.TimeoutExpired):
        server.stop("immediate")


@contextmanager
def postgres_server() -> Iterator[PgServer]:
    """A fresh PostgreSQL server of the test's own, stopped and removed afterwards."""
    bindir = _binaries()
    with _workdir() as root:
        server = _initdb(bindir, root, "standalone")
        server.start()
        try:
            yield server
        finally:
            _stop_quietly(server)


@contextmanager
def streaming_pair() -> Iterator[StreamingPair]:
    """A primary and a replica made from it by ``pg_basebackup -R``, both running; removed afterwards."""
    bindir = _binaries()
    with _workdir() as root:
        primary = _initdb(bindir, root, "primary")
        primary.start()
        replica = PgServer(bindir, root / "replica", free_port(), "replica")
        try:
            primary.run(
                "pg_basebackup",
                *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
                *("-D", str(replica.datadir), "-R", "-X", "stream", "-c", "fast"),
            )
            replica.configure()  # its own port; the rest is inherited from the primary's copy
            replica.start()
            yield StreamingPair(primary, replica)
        finally:
            _stop_quietly(replica)
            _stop_quietly(primary)
