"""Store contract: the same behaviour on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from decisionflow.vocabulary import ApplyResult, CaseId, Consistency, OperationId, Receipt
from decisionflow_server.storage import db
from effect_receiver.domain import Effect, check_effect
from effect_receiver.errors import IdempotencyKeyReused, Unavailable
from effect_receiver.service import ReceiverService
from effect_receiver.store import EffectStore, migrate
from tests.support.receiver import CASE_ID, closed_port, effect_request, new_operation_id, payload_for

T0 = datetime(2026, 11, 29, 21, 0, 0, 250000, tzinfo=UTC)


@pytest.fixture
def store(database_url: str) -> Iterator[EffectStore]:
    engine = db.create_engine(database_url)
    migrate(engine)
    migrate(engine)  # a second run is a no-op: every replica runs it at start
    try:
        yield EffectStore(engine)
    finally:
        engine.dispose()


def effect(operation_id: str, case_id: str = CASE_ID, **overrides: str) -> Effect:
    checked = check_effect(effect_request(operation_id, case_id, payload_for(operation_id, case_id, **overrides)))
    assert isinstance(checked, Effect), checked
    return checked


def receipt(operation_id: str, n: int = 0) -> Receipt:
    return Receipt(f"rcpt-{n:032x}", OperationId(operation_id), T0 + timedelta(seconds=n))


def stored_rows(store: EffectStore, operation_id: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    with store.engine.connect() as conn:
        effect_row = conn.execute(
            sa.text("SELECT payload, payload_digest, receipt_id FROM effects WHERE operation_id = :o"),
            {"o": operation_id},
        ).one()
        record_row = conn.execute(
            sa.text("SELECT case_id, body, reviewer FROM support_review_records WHERE operation_id = :o"),
            {"o": operation_id},
        ).one()
    return tuple(effect_row), tuple(record_row)


def test_apply_creates_the_effect_and_its_record_in_one_go(store: EffectStore) -> None:
    operation_id = new_operation_id()
    assert store.lookup(operation_id) is None
    answer = store.apply(effect(operation_id), receipt(operation_id))
    assert answer.outcome is ApplyResult.CREATED
    assert answer.receipt == receipt(operation_id)
    assert store.lookup(operation_id) == receipt(operation_id)  # applied_at survives the round trip, in UTC
    effect_row, record_row = stored_rows(store, operation_id)
    assert effect_row[0] == payload_for(operation_id)
    assert record_row == (CASE_ID, effect(operation_id).body, "rita@example.com")
    assert store.count_effects() == 1


def test_a_repeat_replays_the_original_receipt(store: EffectStore) -> None:
    operation_id = new_operation_id()
    store.apply(effect(operation_id), receipt(operation_id, 1))
    answer = store.apply(effect(operation_id), receipt(operation_id, 2))
    assert answer.outcome is ApplyResult.REPLAYED
    assert answer.receipt == receipt(operation_id, 1)
    assert store.count_effects() == 1


def test_a_key_reused_with_another_payload_is_refused_and_the_effect_unchanged(store: EffectStore) -> None:
    operation_id = new_operation_id()
    store.apply(effect(operation_id), receipt(operation_id, 1))
    before = stored_rows(store, operation_id)
    with pytest.raises(IdempotencyKeyReused) as refused:
        store.apply(effect(operation_id, body="A different reply."), receipt(operation_id, 2))
    assert refused.value.operation_id == operation_id
    assert refused.value.metadata == {"operation_id": operation_id}
    assert stored_rows(store, operation_id) == before
    assert store.lookup(operation_id) == receipt(operation_id, 1)
    assert store.count_effects() == 1


def test_a_new_key_whose_receipt_id_is_taken_fails_and_writes_nothing(store: EffectStore) -> None:
    # Only the operation id's conflict is an answer (a replay); any other constraint still fails.
    first, second = new_operation_id(), new_operation_id()
    store.apply(effect(first), receipt(first, 1))
    taken = receipt(first, 1)
    with pytest.raises(sa.exc.IntegrityError):
        store.apply(effect(second), Receipt(taken.receipt_id, second, taken.applied_at))
    assert store.lookup(second) is None
    assert store.count_effects() == 1
    assert store.lookup(first) == receipt(first, 1)


def test_batch_lookup_answers_in_request_order(store: EffectStore) -> None:
    applied = [new_operation_id() for _ in range(3)]
    for n, operation_id in enumerate(applied):
        store.apply(effect(operation_id), receipt(operation_id, n))
    missing = [new_operation_id() for _ in range(2)]
    asked = [missing[0], applied[2], applied[0], missing[1], applied[2], applied[1]]
    assert store.batch_lookup(asked) == {op: receipt(op, n) for n, op in enumerate(applied)}
    answers = ReceiverService(store, clock=lambda: T0).batch_lookup(asked)
    assert [a.operation_id for a in answers] == asked
    assert [a.applied for a in answers] == [False, True, True, False, True, True]
    assert answers[1].receipt == receipt(applied[2], 2)
    assert {(a.consistency, a.observed_at) for a in answers} == {(Consistency.STRONG, T0)}


def test_list_effects_pages_one_case_oldest_first(store: EffectStore) -> None:
    ours = [new_operation_id() for _ in range(5)]
    for n, operation_id in enumerate(ours):
        store.apply(effect(operation_id), receipt(operation_id, n))
        other = new_operation_id()
        store.apply(effect(other, "T-7"), receipt(other, 100 + n))
    listed: list[str] = []
    after = 0
    pages = 0
    while True:
        page = store.list_effects(CASE_ID, after=after, limit=2)
        pages += 1
        listed += [e.operation_id for e in page.effects]
        assert all(e.case_id == CASE_ID and e.reviewer == "rita@example.com" for e in page.effects)
        if page.next_after is None:
            break
        after = page.next_after
    assert listed == ours
    assert pages == 3
    first = store.list_effects(CASE_ID, after=0, limit=1).effects[0]
    assert (first.receipt, first.kind, first.payload_digest) == (
        receipt(ours[0], 0),
        "record_support_review",
        hashlib.sha256(payload_for(ours[0])).hexdigest(),
    )
    assert store.list_effects(CaseId("T-unknown"), after=0, limit=10).effects == ()


def test_an_unreachable_database_is_unavailable() -> None:
    engine = db.create_engine(f"postgresql://postgres@127.0.0.1:{closed_port()}/nowhere")
    try:
        store = EffectStore(engine)
        operation_id = new_operation_id()
        with pytest.raises(Unavailable):
            store.lookup(operation_id)
        with pytest.raises(Unavailable):
            store.apply(effect(operation_id), receipt(operation_id))
    finally:
        engine.dispose()


def test_a_write_that_cannot_begin_on_a_locked_sqlite_file_is_unavailable_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another program holds SQLite's write lock past the busy timeout: BEGIN IMMEDIATE fails.
    monkeypatch.setattr(db, "SQLITE_BUSY_TIMEOUT_MS", 200)
    path = tmp_path / "receiver.db"
    engine = db.create_engine(f"sqlite:///{path}")
    migrate(engine)
    store = EffectStore(engine)
    operation_id = new_operation_id()
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        refused = r"^receiver database unavailable: the database cannot answer: it is unreachable, busy or failing over"
        with pytest.raises(Unavailable, match=refused):
            store.apply(effect(operation_id), receipt(operation_id))
        blocker.execute("ROLLBACK")
        assert store.lookup(operation_id) is None
        # The lock released, the same store writes at once (its connections are intact).
        assert store.apply(effect(operation_id), receipt(operation_id)).outcome is ApplyResult.CREATED
    finally:
        blocker.close()
        engine.dispose()
