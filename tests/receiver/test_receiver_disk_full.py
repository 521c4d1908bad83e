"""A full SQLite database (SQLITE_FULL) refuses Apply as Unavailable naming the full disk; reads go on.

The database is capped with ``PRAGMA max_page_count`` on every connection, which makes SQLite
answer exactly as on a full disk ("database or disk is full"), without root or a mount.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from decisionflow.vocabulary import ApplyResult, Receipt
from decisionflow_server.storage import db
from effect_receiver.domain import Effect, check_effect
from effect_receiver.errors import Unavailable
from effect_receiver.store import EffectStore, migrate
from tests.support.receiver import CASE_ID, effect_request, new_operation_id

T0 = datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC)
MAX_WRITES = 200
REFUSALS = 5


class PageCap:
    """The page limit every new connection of an engine sets (0: SQLite's default, no cap)."""

    def __init__(self) -> None:
        self.pages = 0

    def apply(self, dbapi_connection: Any, _record: Any) -> None:
        if self.pages:
            dbapi_connection.execute(f"PRAGMA max_page_count={self.pages}")


def _effect(operation_id: str) -> Effect:
    checked = check_effect(effect_request(operation_id, CASE_ID))
    assert isinstance(checked, Effect), checked
    return checked


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[tuple[EffectStore, sa.Engine, PageCap]]:
    engine = db.create_engine(f"sqlite:///{tmp_path / 'receiver.db'}")
    cap = PageCap()
    event.listen(engine, "connect", cap.apply)
    migrate(engine)
    try:
        yield EffectStore(engine), engine, cap
    finally:
        engine.dispose()


def test_a_full_database_refuses_apply_clearly_keeps_reads_and_recovers(
    capped: tuple[EffectStore, sa.Engine, PageCap],
) -> None:
    store, engine, cap = capped
    first = new_operation_id()
    store.apply(_effect(first), Receipt("rcpt-first", first, T0))
    with engine.connect() as conn:
        pages = conn.execute(sa.text("PRAGMA page_count")).scalar_one()
    engine.dispose()  # new connections take the cap
    cap.pages = int(pages)

    # The last page may still hold a row or two; then every write is refused.
    written, refused, messages = [], [], []
    for i in range(MAX_WRITES):
        operation_id = new_operation_id()
        try:
            store.apply(_effect(operation_id), Receipt(f"rcpt-{i}", operation_id, T0))
        except Unavailable as error:
            refused.append(operation_id)
            messages.append(error.message)
            if len(refused) == REFUSALS:
                break
        else:
            assert not refused, "a write succeeded after the database was full"
            written.append(operation_id)
    assert messages == [f"receiver database unavailable: {db.STORAGE_FULL_MESSAGE}"] * REFUSALS
    # Reads still answer, and nothing of the refused writes is there.
    assert store.lookup(first) is not None
    assert all(store.lookup(op) is not None for op in written)
    assert all(store.lookup(op) is None for op in refused)

    cap.pages = 0
    engine.dispose()
    later = refused[0]
    assert store.apply(_effect(later), Receipt("rcpt-later", later, T0)).outcome is ApplyResult.CREATED
    with engine.connect() as conn:
        assert conn.execute(sa.text("PRAGMA integrity_check")).scalar_one() == "ok"


def test_only_a_full_disk_is_named() -> None:
    try:
        sqlite3.connect(":memory:").execute("SELECT * FROM missing")
    except sqlite3.OperationalError as error:
        assert not db.storage_full(error)
    assert not db.storage_full(ValueError("database or disk is full"))
