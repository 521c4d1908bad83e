"""Store contract of the reviewer's inbox, on SQLite and PostgreSQL: only every case's current, undecided
proposal is listed, oldest first, with its pending review and version count; keyset pages walk it all;
the filters match exactly."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from decisionflow.vocabulary import CaseId, Decision, OperationId
from decisionflow_server.storage import db
from orchestrator.domain import PendingReview, PendingReviewEntry, PendingReviewFilter, Proposal, RecordedDecision
from orchestrator.store import EVERY_REVIEW, OrchestratorStore, Reader, inbox_key, migrate
from tests.support.seeding import proposal_for

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
EVERYTHING = PendingReviewFilter()


@pytest.fixture
def store(database_url: str) -> Iterator[OrchestratorStore]:
    """A store on a fresh, migrated database of each kind."""
    engine = db.create_engine(database_url)
    migrate(engine)
    try:
        yield OrchestratorStore(engine)
    finally:
        engine.dispose()


def _review(p: Proposal) -> PendingReview:
    return PendingReview(p.operation_id, "decisionflow.review", "1", "graph", f"cp-{uuid.uuid4().hex[:12]}", T0)


def _start(
    store: OrchestratorStore, case_id: str, minute: int, *, author: str = "arthur", body: str = "Update to 4.2.1."
) -> Proposal:
    p = proposal_for(case_id, body, T0 + timedelta(minutes=minute), created_by=author)
    stored, created = store.create_proposal(p, _review(p), ())
    assert created
    return stored


def _edit(store: OrchestratorStore, parent: Proposal, body: str, minute: int, *, author: str = "edna") -> Proposal:
    p = proposal_for(parent.case_id, body, T0 + timedelta(minutes=minute), created_by=author)
    p = replace(p, human_edited=True, parent_operation_id=parent.operation_id)
    return store.create_edit(p, parent.operation_id, _review(p), ())


def _decide(store: OrchestratorStore, p: Proposal, decision: Decision = Decision.DECLINE) -> None:
    store.record_decision(RecordedDecision(p.operation_id, decision, "rita", T0 + timedelta(hours=1)), p.case_id, [])


def _ids(entries: list[PendingReviewEntry]) -> list[str]:
    return [entry.proposal.operation_id for entry in entries]


def test_only_current_undecided_proposals_are_listed_oldest_first(store: OrchestratorStore) -> None:
    a = _start(store, "T-1", minute=3)
    b = _start(store, "T-2", minute=1)
    c = _start(store, "T-3", minute=2)
    b2 = _edit(store, b, "Update to 4.2.2.", minute=10)
    _decide(store, c)

    entries = store.list_pending_reviews(EVERYTHING, 10, None)

    # b was superseded by its edit, c is decided: the edit (minute 10) comes after a (minute 3).
    assert _ids(entries) == [a.operation_id, b2.operation_id]
    first, edited = entries
    assert (first.versions, edited.versions) == (1, 2)
    assert first.proposal == a and edited.proposal == b2
    assert first.review == store.get_pending_review(a.operation_id)
    assert edited.review.operation_id == b2.operation_id
    assert (first.pending_since, edited.pending_since) == (a.created_at, b2.created_at)


def test_versions_count_every_edit_and_replacement_in_the_chain(store: OrchestratorStore) -> None:
    p = _start(store, "T-1", minute=0)
    for n in range(1, 5):
        p = _edit(store, p, f"Update to 5.{n}.", minute=n)
    (entry,) = store.list_pending_reviews(EVERYTHING, 10, None)
    assert entry.proposal.operation_id == p.operation_id
    assert entry.versions == 5


def test_an_edit_back_to_earlier_content_lists_that_proposal_once(store: OrchestratorStore) -> None:
    first = _start(store, "T-1", minute=0)
    second = _edit(store, first, "Something else.", minute=1)
    back = _edit(store, second, first.content.body, minute=2, author="arthur")
    assert back.operation_id == first.operation_id
    (entry,) = store.list_pending_reviews(EVERYTHING, 10, None)
    # The earlier proposal is current again; its own chain holds only itself.
    assert (entry.proposal.operation_id, entry.versions) == (first.operation_id, 1)


def test_pages_of_one_walk_every_entry_once_in_order(store: OrchestratorStore) -> None:
    # Two proposals recorded at the same instant: the operation id breaks the tie.
    started = [_start(store, f"T-{i}", minute=i // 2) for i in range(7)]
    expected = sorted(started, key=lambda p: (p.created_at, p.operation_id))
    walked: list[str] = []
    after: tuple[datetime, OperationId] | None = None
    while True:
        page = store.list_pending_reviews(EVERYTHING, 1, after)
        if not page:
            break
        assert len(page) == 1
        walked += _ids(page)
        after = (page[-1].pending_since, page[-1].proposal.operation_id)
    assert walked == [p.operation_id for p in expected]
    assert _ids(store.list_pending_reviews(EVERYTHING, 3, None)) == walked[:3]


def test_filters_match_exactly_and_together(store: OrchestratorStore) -> None:
    t1 = _start(store, "T-1", minute=0, author="arthur")
    t10 = _start(store, "T-10", minute=1, author="amy")
    lower = _start(store, "t-11", minute=2, author="arthur")
    x1 = _start(store, "X_1", minute=3, author="arthur")
    xa1 = _start(store, "XA1", minute=4, author="arthur")

    def listed(**filters: str) -> list[str]:
        return _ids(store.list_pending_reviews(PendingReviewFilter(**filters), 10, None))  # type: ignore[arg-type]

    assert listed(case_id=CaseId("T-1")) == [t1.operation_id]
    assert listed(case_id_prefix="T-1") == [t1.operation_id, t10.operation_id]  # case matters: not t-11
    assert listed(case_id_prefix="t-") == [lower.operation_id]
    # '_' is an ordinary character here, not a wildcard: XA1 does not start with X_.
    assert listed(case_id_prefix="X_") == [x1.operation_id]
    assert listed(created_by="amy") == [t10.operation_id]
    assert listed(created_by="arthur", case_id_prefix="T") == [t1.operation_id]
    assert listed(action="record_support_review") == _ids(store.list_pending_reviews(EVERYTHING, 10, None))
    assert listed(action="another_action") == []
    assert listed(case_id=CaseId("T-404")) == []
    assert xa1.operation_id in _ids(store.list_pending_reviews(EVERYTHING, 10, None))


def test_the_inbox_query_pages_through_the_state_index(store: OrchestratorStore) -> None:
    # No index of its own: the keyset order is that of ix_operations_state_changed.
    with store.engine.connect() as conn:
        names = {index["name"] for index in sa.inspect(conn).get_indexes("operations")}
    assert "ix_operations_state_changed" in names
    assert store.list_pending_reviews(EVERYTHING, 10, None) == []


def test_a_counted_inbox_totals_every_page_with_the_same_filters(store: OrchestratorStore) -> None:
    started = [_start(store, f"T-{i}", minute=i, author="amy" if i % 3 == 0 else "arthur") for i in range(7)]
    _edit(store, started[1], "Update to 4.2.2.", minute=20)  # replaces T-1's proposal: still one entry
    _decide(store, started[2])  # decided: no longer in the inbox

    page = store.pending_reviews_listing(EVERYTHING, 2, None, counted=True)
    assert page.total_size == 6
    last = page.rows[-1]
    later = store.pending_reviews_listing(EVERYTHING, 2, inbox_key(last), counted=True)
    assert later.total_size == 6 and len(later.rows) == 2
    assert store.pending_reviews_listing(PendingReviewFilter(created_by="amy"), 2, None, counted=True).total_size == 3
    by_prefix = PendingReviewFilter(case_id_prefix="T-1")
    assert store.pending_reviews_listing(by_prefix, 2, None, counted=True).total_size == 1
    assert store.pending_reviews_listing(PendingReviewFilter(action="another"), 2, None, counted=True).total_size == 0
    uncounted = store.pending_reviews_listing(EVERYTHING, 2, None, counted=False)
    assert uncounted.total_size is None and uncounted.rows == page.rows


def test_a_reviewer_listing_reviews_under_the_default_rule_costs_what_it_did(store: OrchestratorStore) -> None:
    for n in range(5):
        _start(store, f"T-{n}", minute=n)
    statements: list[str] = []

    @sa.event.listens_for(store.engine, "before_cursor_execute")
    def _count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            statements.append(statement)

    reviewer = Reader("rita", frozenset({"support"}), sees_all=False)
    for reader in (EVERY_REVIEW, reviewer):
        statements.clear()
        page = store.pending_reviews_listing(EVERYTHING, 3, None, counted=False, reader=reader, now=T0)
        assert [e.progress for e in page.rows] == [None] * 3
        assert len(statements) == 2  # the page and its version counts, whatever the page's size
    statements.clear()
    assert store.pending_reviews_listing(EVERYTHING, 3, None, counted=True, reader=reviewer, now=T0).total_size == 5
    # Counted for a reviewer: the default rule's count, and the (here empty) read of the reviews under a rule.
    assert len(statements) == 4
