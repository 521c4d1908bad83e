"""Statements and commits per call, counted at both ends: what the services send (their SQL trace,
``bench._sql_trace``) and what PostgreSQL counted (``pg_stat_database`` of each service's database).

The two must agree: every commit and pre-ping a service sends is one ``xact_commit`` of its
database, every rollback of an open transaction one ``xact_rollback``. What else could commit
there is noise the server counts and the trace cannot: autovacuum and autoanalyze (when the
server runs them), and any other client of the database (the bench reads the statistics from
the database its URL names, never from a service's).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import psycopg

# Column names of pg_stat_database read for each window.
SERVER_COUNTERS = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted", "tup_fetched")
# A backend sends its counters to the statistics when it goes idle, but at most once a second: one
# that sent them less than a second ago sends the rest 10 s later (PostgreSQL's idle interval), so up
# to 11 s after the last change seen. A window ends once the counters have not moved for 3 s longer
# than that: at 11 s, a loaded machine's late timer put 4 commits of the warm-up into the next window.
STATS_QUIET_SECONDS = 14.0
STATS_POLL_SECONDS = 1.0
STATS_WAIT_LIMIT_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Event:
    """One line of a service's SQL trace."""

    pid: int
    conn: int
    kind: str  # statement, commit, rollback, ping
    at: float
    sql: str = ""


@dataclass(frozen=True, slots=True)
class ClientTally:
    """What one service sent in a window: SQL statements, commits, rollbacks of open transactions and
    pings (each one statement in autocommit, sent for a connection that sat idle)."""

    statements: int = 0
    commits: int = 0
    rollbacks: int = 0
    pings: int = 0

    @property
    def server_commits(self) -> int:
        """The commits PostgreSQL counts for these: every commit and every pre-ping."""
        return self.commits + self.pings


@dataclass(frozen=True, slots=True)
class ServerTally:
    """The change of a database's pg_stat_database counters over a window."""

    xact_commit: int = 0
    xact_rollback: int = 0
    tup_inserted: int = 0
    tup_updated: int = 0
    tup_deleted: int = 0
    tup_fetched: int = 0


class Trace:
    """A service's SQL trace file, read by offsets: mark() before a window, events(since) after it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        """The current end of the file."""
        return self.path.stat().st_size if self.path.exists() else 0

    def events(self, since: int, until: int | None = None) -> list[Event]:
        """The events written between two marks (until: the end of the file)."""
        with self.path.open("rb") as trace:
            trace.seek(since)
            chunk = trace.read() if until is None else trace.read(until - since)
        return [Event(**json.loads(line)) for line in chunk.decode("utf-8").split("\n") if line]


def tally(events: Sequence[Event]) -> ClientTally:
    """Count the events of a window."""
    kinds = [e.kind for e in events]
    return ClientTally(kinds.count("statement"), kinds.count("commit"), kinds.count("rollback"), kinds.count("ping"))


def server_counters(admin_url: str, databases: Sequence[str]) -> dict[str, ServerTally]:
    """pg_stat_database of each database now, read once the counters have stopped moving."""

    def read() -> dict[str, ServerTally]:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(
                f"SELECT datname, {', '.join(SERVER_COUNTERS)} FROM pg_stat_database WHERE datname = ANY(%s)",  # noqa: S608 - fixed column names
                (list(databases),),
            ).fetchall()
        return {row[0]: ServerTally(*(int(v) for v in row[1:])) for row in rows}

    last = read()
    quiet_since = started = time.monotonic()
    while (
        time.monotonic() - quiet_since < STATS_QUIET_SECONDS and time.monotonic() - started < STATS_WAIT_LIMIT_SECONDS
    ):
        time.sleep(STATS_POLL_SECONDS)
        now = read()
        if now != last:
            last, quiet_since = now, time.monotonic()
    return last


def difference(after: ServerTally, before: ServerTally) -> ServerTally:
    """after minus before, counter by counter."""
    return ServerTally(*(getattr(after, f.name) - getattr(before, f.name) for f in fields(ServerTally)))


@dataclass(frozen=True, slots=True)
class Transaction:
    """One transaction a service ran: its statements and how it ended (COMMIT, ROLLBACK, or None for
    a pre-ping, which runs alone in autocommit)."""

    statements: tuple[str, ...]
    end: str | None
    at: float


def transactions(events: Sequence[Event]) -> list[Transaction]:
    """Group a window's events into transactions per connection, in the order they ended."""
    open_statements: dict[tuple[int, int], list[str]] = {}
    done: list[Transaction] = []
    for event in events:
        key = (event.pid, event.conn)
        if event.kind == "statement":
            open_statements.setdefault(key, []).append(event.sql)
        elif event.kind == "ping":
            done.append(Transaction(("SELECT 1",), None, event.at))
        else:
            statements = open_statements.pop(key, [])
            if statements:
                done.append(Transaction(tuple(statements), event.kind.upper(), event.at))
    if open_statements:
        raise ValueError(f"{len(open_statements)} transaction(s) still open at the end of the window")
    return sorted(done, key=lambda t: t.at)


def as_json(value: Any) -> dict[str, int]:
    """A tally as a JSON object."""
    return {f.name: getattr(value, f.name) for f in fields(value)}
