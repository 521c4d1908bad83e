"""Shared fixtures: free ports, fresh SQLite files and fresh PostgreSQL databases.

PostgreSQL tests use ``DECISIONFLOW_TEST_POSTGRES_URL`` (default: the local ``test``
database). Without a reachable server they skip with the reason, unless
``DECISIONFLOW_REQUIRE_POSTGRES=1`` (as in CI), where they fail instead.

The fault campaigns' options live here because pytest reads ``pytest_addoption`` only from
the root conftest; ``tests/campaigns`` reads them.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def pytest_addoption(parser: pytest.Parser) -> None:
    """The fault campaigns' sizes (CI runs the defaults) and the seed that replays one failure."""
    group = parser.getgroup("campaigns", "fault campaigns (tests/campaigns)")
    group.addoption("--schedules", type=int, default=50, help="seeded random kill schedules to run (default 50)")
    group.addoption(
        "--campaign-ops", type=int, default=1000, help="operations in the lost-reply campaign (default 1000)"
    )
    group.addoption("--crash-repetitions", type=int, default=3, help="repetitions of each crash point (default 3)")
    group.addoption("--race-reviews", type=int, default=200, help="reviews raced by 8 approvers (default 200)")
    group.addoption("--seed", type=int, default=None, help="replay one campaign seed (printed by a failing campaign)")


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
