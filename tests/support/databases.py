"""Fresh databases for tests: PostgreSQL databases made and dropped per test, SQLite files in tmp_path.

PostgreSQL tests use ``DECISIONFLOW_TEST_POSTGRES_URL`` (default: the local ``test``
database). Without a reachable server they skip with the reason, unless
``DECISIONFLOW_REQUIRE_POSTGRES=1`` (as in CI), where they fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _postgres_base_url() -> str:
    return os.environ.get("DECISIONFLOW_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


def _require_postgres() -> bool:
    return os.environ.get("DECISIONFLOW_REQUIRE_POSTGRES") == "1"


def _replace_database(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


def create_postgres_database() -> str:
    """Create an empty PostgreSQL database and return its URL (skips or fails when unreachable)."""
    base = _postgres_base_url()
    try:
        admin = psycopg.connect(base, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if _require_postgres():
            pytest.fail(f"PostgreSQL required but unreachable at {base}: {exc}")
        pytest.skip(f"PostgreSQL unreachable at {base} (set DECISIONFLOW_TEST_POSTGRES_URL): {exc}")
    name = "dftest_" + uuid.uuid4().hex[:12]
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return _replace_database(base, name)


def drop_postgres_database(url: str) -> None:
    """Drop a database made by create_postgres_database, closing its connections first."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(_postgres_base_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
