"""Fresh databases for one benchmark run: SQLite files in the work directory, or PostgreSQL databases
created next to the one a URL names and dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg


@dataclass(frozen=True, slots=True)
class Databases:
    """The orchestrator's and the receiver's database URLs (each service owns its own)."""

    kind: str  # "sqlite" or "postgresql"
    orchestrator_url: str
    receiver_url: str


def _sibling(url: str, name: str) -> str:
    # Same server, user and options; only the database name differs.
    address, question, query = url.partition("?")
    base, _, _ = address.rpartition("/")
    return f"{base}/{name}{question}{query}"


@contextmanager
def fresh_databases(workdir: Path, postgres_url: str | None) -> Iterator[Databases]:
    """Yield empty databases for both services; PostgreSQL ones are dropped on exit."""
    if postgres_url is None:
        yield Databases("sqlite", f"sqlite:///{workdir / 'orchestrator.db'}", f"sqlite:///{workdir / 'receiver.db'}")
        return
    suffix = uuid.uuid4().hex[:10]
    names = (f"bench_orchestrator_{suffix}", f"bench_receiver_{suffix}")
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as admin:
        for name in names:
            admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield Databases("postgresql", _sibling(postgres_url, names[0]), _sibling(postgres_url, names[1]))
    finally:
        with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
