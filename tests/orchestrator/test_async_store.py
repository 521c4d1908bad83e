"""The store's async facade: each coroutine runs its sync method's database work in a worker thread
(never on the event loop's), answers and refuses exactly as the sync store does, and a coroutine
declared under another method's name is refused when the class is made."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from decisionflow.vocabulary import CaseId, OperationId
from decisionflow.vocabulary import OperationState as State
from decisionflow_server.storage import db
from orchestrator.errors import NotFound
from orchestrator.store import AsyncOrchestratorStore, OrchestratorStore, migrate
from orchestrator.store._async import in_thread
from tests.support.seeding import proposal_for, seed_decided

NOW = datetime(2026, 11, 29, 21, 0, tzinfo=UTC)
UNKNOWN_ID = OperationId("op-v1-" + "0" * 64)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    """A migrated SQLite orchestrator database."""
    engine = db.create_engine(f"sqlite:///{tmp_path / 'orchestrator.db'}")
    migrate(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def test_each_coroutine_answers_as_the_sync_store_from_a_worker_thread(engine: sa.Engine) -> None:
    store = OrchestratorStore(engine)
    seeded = seed_decided(store, proposal_for("T-7", "Please update.", NOW), NOW, attempted_at=NOW)
    op, later = seeded.operation_id, NOW + timedelta(hours=1)
    statement_threads: list[int] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def _record_thread(*_: Any) -> None:
        statement_threads.append(threading.get_ident())

    async def through_the_facade() -> tuple[int, list[Any]]:
        facade = AsyncOrchestratorStore(store)
        answers: list[Any] = [
            await facade.get_proposal(op),
            await facade.find_proposal(UNKNOWN_ID),
            await facade.current_operation_id(CaseId("T-7")),
            await facade.get_operation(op),
            await facade.list_operations([State.UNKNOWN], later, 10, None, case_id=CaseId("T-7")),
        ]
        with pytest.raises(NotFound):
            await facade.get_proposal(UNKNOWN_ID)
        return threading.get_ident(), answers

    loop_thread, answers = asyncio.run(through_the_facade())
    assert statement_threads and loop_thread not in statement_threads
    assert answers == [
        store.get_proposal(op),
        None,
        op,
        store.get_operation(op),
        store.list_operations([State.UNKNOWN], later, 10, None, case_id=CaseId("T-7")),
    ]
    assert answers[3].state is State.UNKNOWN


def test_a_coroutine_named_after_another_method_is_refused() -> None:
    with pytest.raises(Exception) as refused:

        class Crossed(AsyncOrchestratorStore):
            get_operation = in_thread(OrchestratorStore.get_proposal)  # type: ignore[assignment]

    # Python 3.11 wraps an error raised by __set_name__ in a RuntimeError; 3.12 raises it as it is.
    error = refused.value.__cause__ if isinstance(refused.value, RuntimeError) else refused.value
    assert isinstance(error, TypeError)
    assert "Crossed.get_operation runs OrchestratorStore.get_proposal" in str(error)
