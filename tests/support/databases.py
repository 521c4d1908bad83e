"""Fresh databases for tests: PostgreSQL databases made and dropped per test, SQLite files in tmp_path.

PostgreSQL tests use ``DECISIONFLOW_TEST_POSTGRES_URL`` (default: the local ``test``
database). Without a reachable server they skip with the reason, unless
``DECISIONFLOW_REQUIRE_POSTGRES=1`` (as in CI), where they fail instead.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from decisionflow_server.storage import db

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _postgres_base_url() -> str:
    return os.environ.get("DECISIONFLOW_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


def _require_postgres() -> bool:
    return os.environ.get("DECISIONFLOW_REQUIRE_POSTGRES") == "1"


def _replace_database(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


def create_postgres_database(*, encoding: str = "") -> str:
    """Create an empty PostgreSQL database (in encoding, from template0 with the C locale, when given) and
    return its URL (skips or fails when unreachable)."""
    base = _postgres_base_url()
    try:
        admin = psycopg.connect(base, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if _require_postgres():
            pytest.fail(f"PostgreSQL required but unreachable at {base}: {exc}")
        pytest.skip(f"PostgreSQL unreachable at {base} (set DECISIONFLOW_TEST_POSTGRES_URL): {exc}")
    name = "dftest_" + uuid.uuid4().hex[:12]
    with admin:
        encoded = f" ENCODING '{encoding}' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'" if encoding else ""
        admin.execute(f'CREATE DATABASE "{name}"{encoded}')
    return _replace_database(base, name)


def drop_postgres_database(url: str) -> None:
    """Drop a database made by create_postgres_database, closing its connections first."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(_postgres_base_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def copy_database(url: str, directory: Path, name: str) -> str:
    """A copy of the database at url, which nothing may be writing: a SQLite file copied by SQLite's own
    backup (what its log holds included) to directory/name.db, or a PostgreSQL database made with the
    original as its template (drop it with drop_postgres_database); the copy's URL."""
    if url.startswith("sqlite:///"):
        copy = directory / f"{name}.db"
        source, target = sqlite3.connect(url.removeprefix("sqlite:///")), sqlite3.connect(copy)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        return f"sqlite:///{copy}"
    template = url.rsplit("/", 1)[1]
    copy_name = "dftest_" + uuid.uuid4().hex[:12]
    with psycopg.connect(_postgres_base_url(), autocommit=True) as admin:
        # A template must have no session: a pooled connection the stopped servers left is ended first.
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (template,),
        )
        admin.execute(f'CREATE DATABASE "{copy_name}" TEMPLATE "{template}"')
    return _replace_database(url, copy_name)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    url = create_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database of each kind: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'test.db'}"
        return
    url = create_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


def empty_tables(engine: sa.Engine, metadata: sa.MetaData) -> None:
    """Delete every row of metadata's tables on engine (dependents first); the schema and its version stay."""
    with engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())


def migrated_engine(
    request: pytest.FixtureRequest, tmp_path: Path, name: str, migrate: Callable[[sa.Engine], object]
) -> Iterator[sa.Engine]:
    """Yield an engine on a fresh database of request.param's kind (sqlite: tmp_path/name.db), migrated."""
    url = (
        f"sqlite:///{tmp_path / (name + '.db')}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = db.create_engine(url)
    migrate(engine)
    try:
        yield engine
    finally:
        engine.dispose()
