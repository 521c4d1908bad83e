"""Store contract for a proposal's parent and authors, on SQLite and PostgreSQL: a replacement by
StartReview records what it replaced, and every proposal carries the authors of its whole chain of
edits and replacements, also for rows that were written before authors were stored."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic import command

from decisionflow.vocabulary import CaseId
from decisionflow_server.storage import db
from orchestrator.domain import PendingReview, Proposal, SealedCheckpoint, evidence_to_json, policy_to_json
from orchestrator.schema import proposals
from orchestrator.store import MIGRATIONS, VERSION_TABLE, OrchestratorStore, migrate
from tests.support.seeding import proposal_for

T0 = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    """An engine on a fresh, unmigrated database of each kind."""
    engine = db.create_engine(database_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def store(engine: sa.Engine) -> OrchestratorStore:
    """A store on the migrated database."""
    migrate(engine)
    return OrchestratorStore(engine)


def _proposal(
    body: str, author: str, parent: Proposal | None = None, *, edited: bool = False, case_id: str = "C-1"
) -> Proposal:
    """What the service hands the store: the creator as the only author it knows of."""
    p = proposal_for(case_id, body, T0 + timedelta(seconds=len(body)), created_by=author)
    return replace(p, human_edited=edited, parent_operation_id=None if parent is None else parent.operation_id)


def _review(p: Proposal, checkpoint_id: str) -> PendingReview:
    return PendingReview(p.operation_id, "decisionflow.review", "1", "graph", checkpoint_id, T0)


def _checkpoint(p: Proposal, checkpoint_id: str) -> SealedCheckpoint:
    return SealedCheckpoint(checkpoint_id, "decisionflow.review", "graph", p.operation_id, T0, "key", "0" * 64, b"")


def _start(store: OrchestratorStore, p: Proposal) -> Proposal:
    # Each run of the workflow writes a checkpoint of its own.
    run = f"cp-{uuid.uuid4().hex[:12]}"
    stored, created = store.create_proposal(p, _review(p, run), [_checkpoint(p, run)], p.parent_operation_id)
    assert created
    return stored


def _edit(store: OrchestratorStore, p: Proposal) -> Proposal:
    assert p.parent_operation_id is not None
    run = f"cp-{uuid.uuid4().hex[:12]}"
    return store.create_edit(p, p.parent_operation_id, _review(p, run), [_checkpoint(p, run)])


def test_a_replacement_records_what_it_replaced_and_carries_its_authors(store: OrchestratorStore) -> None:
    first = _start(store, _proposal("Please update.", "sam"))
    assert (first.parent_operation_id, first.authors) == (None, frozenset({"sam"}))

    replacement = _start(store, _proposal("Please update to 4.2.1.", "ava", first))

    assert (replacement.parent_operation_id, replacement.human_edited) == (first.operation_id, False)
    assert replacement.authors == frozenset({"sam", "ava"})
    assert store.current_operation_id(CaseId("C-1")) == replacement.operation_id
    assert store.get_proposal(replacement.operation_id) == replacement
    assert store.decision_inputs(replacement.operation_id).proposal == replacement


def test_authors_accumulate_along_edits_and_replacements(store: OrchestratorStore) -> None:
    first = _start(store, _proposal("One.", "arthur"))
    edited = _edit(store, _proposal("One, edited.", "sam", first, edited=True))
    replaced = _start(store, _proposal("Two, replacing.", "ava", edited))
    again = _edit(store, _proposal("Two, edited again.", "ava", replaced, edited=True))

    assert [p.authors for p in (first, edited, replaced, again)] == [
        frozenset({"arthur"}),
        frozenset({"arthur", "sam"}),
        frozenset({"arthur", "sam", "ava"}),
        frozenset({"arthur", "sam", "ava"}),
    ]
    assert store.decision_inputs(again.operation_id).proposal.authors == frozenset({"arthur", "sam", "ava"})


def test_content_reached_again_keeps_the_authors_it_was_first_recorded_with(store: OrchestratorStore) -> None:
    first = _start(store, _proposal("Mine.", "sam"))
    edited = _edit(store, _proposal("Yours.", "ava", first, edited=True))

    back = _edit(store, _proposal("Mine.", "ava", edited, edited=True))

    assert back == first
    assert store.current_operation_id(CaseId("C-1")) == first.operation_id


def test_a_row_written_without_authors_reads_them_from_its_chain(store: OrchestratorStore) -> None:
    first = _start(store, _proposal("Old release.", "sam"))
    second = _edit(store, _proposal("Old release, edited.", "ava", first, edited=True))
    # A replica of the previous release wrote these rows: no authors column in its inserts.
    with store.engine.begin() as conn:
        conn.execute(proposals.update().values(authors_json=None))

    assert store.get_proposal(first.operation_id).authors == frozenset({"sam"})
    assert store.decision_inputs(second.operation_id).proposal.authors == frozenset({"sam", "ava"})
    third = _edit(store, _proposal("New release, edited.", "rita", second, edited=True))
    assert third.authors == frozenset({"sam", "ava", "rita"})


def test_the_migration_fills_the_authors_of_proposals_already_stored(engine: sa.Engine) -> None:
    config = db.alembic_config(MIGRATIONS, VERSION_TABLE)
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0002")
    first = _proposal("Before the upgrade.", "sam")
    second = _proposal("Before the upgrade, edited.", "ava", first, edited=True)
    third = _proposal("Before the upgrade, another case.", "rita", case_id="C-2")
    with engine.begin() as conn:
        for p in (first, second, third):
            conn.execute(proposals.insert().values(_row(p)))

    migrate(engine)

    store = OrchestratorStore(engine)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).where(proposals.c.authors_json.is_(None))).scalar_one() == 0
    assert store.get_proposal(second.operation_id).authors == frozenset({"sam", "ava"})
    assert store.get_proposal(third.operation_id).authors == frozenset({"rita"})


def _row(p: Proposal) -> dict[str, object]:
    """The proposals row the previous release wrote for p (it had no authors column)."""
    return {
        "operation_id": p.operation_id,
        "case_id": p.case_id,
        "action": p.content.action,
        "body": p.content.body,
        "evidence_json": evidence_to_json(p.content.evidence),
        "evidence_id": p.evidence_id,
        "policy_json": policy_to_json(p.content.policy),
        "policy_id": p.policy_id,
        "human_edited": p.human_edited,
        "parent_operation_id": p.parent_operation_id,
        "created_by": p.created_by,
        "created_at": p.created_at,
    }
