"""PostgreSQL pools ping a connection only after it sat idle or when the server wrote to it
(decisionflow_server.storage.db): one in steady use goes out as it is, one the server dropped while it sat in the
pool, however briefly, is replaced before a transaction sees it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from decisionflow_server.storage import db

pytestmark = pytest.mark.postgres

IDLE_SECONDS = 0.3


@pytest.fixture
def engine(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", IDLE_SECONDS)
    engine = db.create_engine(postgres_url, pool_size=1)
    yield engine
    engine.dispose()


def _backend(engine: Engine) -> int:
    with engine.begin() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def _last_query(postgres_url: str, pid: int) -> str:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        row = admin.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    assert row is not None, f"backend {pid} is gone"
    return str(row[0]).strip().lower()


def test_a_connection_in_steady_use_goes_out_without_a_ping(engine: Engine, postgres_url: str) -> None:
    pid = _backend(engine)
    with engine.connect():  # checked out again at once: the last thing its backend ran is our COMMIT
        assert _last_query(postgres_url, pid) == "commit"


def test_a_connection_idle_past_the_limit_is_pinged_before_use(engine: Engine, postgres_url: str) -> None:
    pid = _backend(engine)
    time.sleep(IDLE_SECONDS * 2)
    with engine.connect():
        # SQLAlchemy's ping for psycopg: an empty statement (";") in autocommit.
        assert _last_query(postgres_url, pid) in {";", "select 1"}


def test_a_connection_dropped_while_idle_is_replaced_before_a_transaction_sees_it(
    engine: Engine, postgres_url: str
) -> None:
    pid = _backend(engine)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    time.sleep(IDLE_SECONDS * 2)
    assert _backend(engine) != pid  # no error: the ping found the dropped connection and the pool reconnected


def test_a_connection_dropped_just_after_use_is_replaced_before_a_transaction_sees_it(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 600.0)  # never idle long enough in this test
    engine = db.create_engine(postgres_url, pool_size=1)
    try:
        pid = _backend(engine)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
            # pg_terminate_backend only signals: wait until the backend has gone (it has then written
            # its FATAL message and closed the socket).
            deadline = time.monotonic() + 10
            while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                assert time.monotonic() < deadline, "the terminated backend did not exit"
                time.sleep(0.005)
        assert _backend(engine) != pid  # no error: the server's goodbye was seen and the pool reconnected
    finally:
        engine.dispose()
