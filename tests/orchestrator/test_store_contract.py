"""Orchestrator store contract: every case runs on SQLite and on PostgreSQL with the same outcome."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.exc import IntegrityError

from decisionflow.identity import EvidenceItem, PolicyRef, identities
from decisionflow.vocabulary import CaseId, Consistency, Decision, LookupStatus, OperationId, OperationState, Receipt
from decisionflow_server.storage import db
from decisionflow_server.storage.schema_compatibility import record_table_name
from orchestrator.domain import (
    FirstAttempt,
    PendingReview,
    PendingReviewFilter,
    Proposal,
    RecordedDecision,
    SealedCheckpoint,
    Settlement,
    proposal_content,
)
from orchestrator.errors import NotFound, NotRedrivable, ReviewExpired, StaleProposal
from orchestrator.schema import metadata
from orchestrator.store import VERSION_TABLE, AttemptInFlight, DecisionAlreadyRecorded, OrchestratorStore, migrate

T0 = datetime(2026, 11, 29, 21, 0, 0, 250000, tzinfo=UTC)
POLICY = PolicyRef("support-replies", "2026-10", 9, {})
EVIDENCE = (EvidenceItem("KB-12", 1, "Update to 4.2.1."),)
ACTION = "record_support_review"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OrchestratorStore]:
    """A migrated orchestrator database of each kind, behind its store."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'orchestrator.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    engine = db.create_engine(url)
    migrate(engine)
    migrate(engine)  # a second run is a no-op: every replica runs it at start
    try:
        yield OrchestratorStore(engine)
    finally:
        engine.dispose()


def proposal(
    case_id: str = "T-1",
    body: str = "Please update to 4.2.1.",
    *,
    parent: OperationId | None = None,
    author: str = "alex@example.com",
    at: datetime = T0,
) -> Proposal:
    content = proposal_content(CaseId(case_id), ACTION, body, EVIDENCE, POLICY)
    ids = identities(content.case_id, content.action, content.body, content.evidence, content.policy)
    return Proposal(
        ids.operation_id,
        content,
        ids.evidence_id,
        ids.policy_id,
        parent is not None,
        parent,
        author,
        at,
        frozenset({author}),
    )


def review(p: Proposal, checkpoint_id: str | None = None, version: str = "1") -> PendingReview:
    checkpoint = checkpoint_id or f"cp-{p.operation_id[-12:]}"
    return PendingReview(p.operation_id, "decisionflow.review", version, "graph", checkpoint, p.created_at)


def checkpoint(p: Proposal, checkpoint_id: str | None = None) -> SealedCheckpoint:
    checkpoint = checkpoint_id or f"cp-{p.operation_id[-12:]}"
    return SealedCheckpoint(checkpoint, "decisionflow.review", "graph", p.operation_id, T0, "key", "0" * 64, b"state")


def started(store: OrchestratorStore, p: Proposal) -> Proposal:
    stored, created = store.create_proposal(p, review(p), [checkpoint(p)])
    assert created
    return stored


def decided(p: Proposal, decision: Decision = Decision.APPROVE, at: datetime = T0) -> RecordedDecision:
    return RecordedDecision(p.operation_id, decision, "rita@example.com", at)


def approved(store: OrchestratorStore, p: Proposal, at: datetime = T0) -> Proposal:
    started(store, p)
    store.record_decision(decided(p, at=at), p.case_id, [])
    return p


def rows(store: OrchestratorStore, sql: str, **params: object) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.text(sql), params).scalar_one())


def test_the_migrated_schema_is_the_tables_the_store_uses(store: OrchestratorStore) -> None:
    with store.engine.connect() as conn:
        # The compatibility record is the migrations' bookkeeping, as the version table is, not the store's.
        record = record_table_name(VERSION_TABLE)
        context = MigrationContext.configure(
            conn,
            opts={
                "version_table": VERSION_TABLE,
                "include_name": lambda name, kind, _parent: not (kind == "table" and name == record),
            },
        )
        assert compare_metadata(context, metadata) == []


def test_the_same_content_twice_is_created_once(store: OrchestratorStore) -> None:
    first = proposal()
    assert store.create_proposal(first, review(first), [checkpoint(first)]) == (first, True)
    again = proposal(author="sam@example.com", at=T0 + timedelta(minutes=1))
    stored, created = store.create_proposal(again, review(again, "cp-other"), [checkpoint(again, "cp-other")])
    assert (stored, created) == (first, False)
    assert rows(store, "SELECT count(*) FROM proposals") == 1
    assert rows(store, "SELECT count(*) FROM checkpoints") == 1
    assert store.current_operation_id(CaseId("T-1")) == first.operation_id


def test_another_constraint_failure_is_not_reported_as_an_existing_proposal(store: OrchestratorStore) -> None:
    first = started(store, proposal())
    other = proposal(case_id="T-2")
    # The new proposal's checkpoint id is taken: a constraint failure that is no duplicate operation id.
    with pytest.raises(IntegrityError):
        store.create_proposal(other, review(other, "cp-taken"), [checkpoint(other, review(first).checkpoint_id)])
    assert store.find_proposal(other.operation_id) is None
    assert store.current_operation_id(CaseId("T-2")) is None
    assert rows(store, "SELECT count(*) FROM operations") == 1


def test_an_edit_moves_the_current_proposal_by_compare_and_set(store: OrchestratorStore) -> None:
    first = started(store, proposal())
    edit = proposal(body="Please update to 4.2.2.", parent=first.operation_id)
    stored = store.create_edit(edit, first.operation_id, review(edit), [checkpoint(edit)])
    assert stored == edit and stored.human_edited and stored.parent_operation_id == first.operation_id
    assert store.current_operation_id(CaseId("T-1")) == edit.operation_id
    assert store.get_pending_review(edit.operation_id) == review(edit)

    stale = proposal(body="Please update to 4.2.3.", parent=first.operation_id)
    with pytest.raises(StaleProposal) as refused:
        store.create_edit(stale, first.operation_id, review(stale), [checkpoint(stale)])
    assert refused.value.current_operation_id == edit.operation_id
    assert store.find_proposal(stale.operation_id) is None
    assert rows(store, "SELECT count(*) FROM checkpoints") == 2

    # Editing back to content that exists makes that proposal current again, adding no proposal; its
    # pending review moves to this edit's checkpoint and the one it had is retired.
    back = proposal(parent=edit.operation_id)
    assert store.create_edit(back, edit.operation_id, review(back, "cp-back"), [checkpoint(back, "cp-back")]) == first
    assert store.current_operation_id(CaseId("T-1")) == first.operation_id
    assert rows(store, "SELECT count(*) FROM proposals") == 2
    assert store.get_pending_review(first.operation_id).checkpoint_id == "cp-back"
    retired = "SELECT count(*) FROM pending_reviews WHERE retired_checkpoint_id = :cp"
    assert rows(store, retired, cp=review(first).checkpoint_id) == 1


def test_a_decision_is_recorded_once(store: OrchestratorStore) -> None:
    p = started(store, proposal())
    recorded = store.record_decision(decided(p), p.case_id, [checkpoint(p, "cp-final")])
    assert (recorded.decision, recorded.state, recorded.attempts) == (decided(p), OperationState.APPROVED, 0)
    assert store.get_operation(p.operation_id) == recorded
    with pytest.raises(DecisionAlreadyRecorded) as again:
        store.record_decision(decided(p, Decision.DECLINE, T0 + timedelta(seconds=1)), p.case_id, [])
    assert again.value.recorded == decided(p)
    assert store.get_decision(p.operation_id) == decided(p)
    assert store.get_operation(p.operation_id).state is OperationState.APPROVED


def test_each_decision_answers_its_own_operation_among_many(store: OrchestratorStore) -> None:
    # The first decision ever recorded, by another reviewer, on another case: an answer read from the
    # wrong row (a subquery matching every row) would carry its decision, reviewer and time.
    first = started(store, proposal(case_id="T-1"))
    declined = RecordedDecision(first.operation_id, Decision.DECLINE, "dora@example.com", T0)
    store.record_decision(declined, first.case_id, [])
    second = started(store, proposal(case_id="T-2"))
    approval = RecordedDecision(second.operation_id, Decision.APPROVE, "rita@example.com", T0 + timedelta(seconds=5))
    answered = store.record_decision(approval, second.case_id, [])
    assert (answered.decision, answered.state) == (approval, OperationState.APPROVED)
    assert store.get_operation(second.operation_id) == answered
    # The same through an approval with its first attempt, and each later write of the operation.
    third = started(store, proposal(case_id="T-3"))
    approval = RecordedDecision(third.operation_id, Decision.APPROVE, "ravi@example.com", T0 + timedelta(seconds=9))
    attempt = FirstAttempt(b"p3", "d3", T0 + timedelta(seconds=20))
    answered = store.record_decision(approval, third.case_id, [], attempt)
    assert answered.decision == approval and store.get_operation(third.operation_id) == answered
    later = T0 + timedelta(seconds=20)
    retried = store.record_attempt(third.operation_id, b"p3", "d3", later, later + timedelta(seconds=10))
    assert retried.decision == approval and store.get_operation(third.operation_id) == retried
    receipt = Receipt("rcpt-3", OperationId(third.operation_id), T0 + timedelta(seconds=21))
    committed = store.record_receipt(third.operation_id, receipt, T0 + timedelta(seconds=21))
    assert committed.decision == approval and store.get_operation(third.operation_id) == committed


def test_a_decision_on_a_proposal_no_longer_current_is_stale(store: OrchestratorStore) -> None:
    first = started(store, proposal())
    edit = proposal(body="Please update to 4.2.2.", parent=first.operation_id)
    store.create_edit(edit, first.operation_id, review(edit), [checkpoint(edit)])
    with pytest.raises(StaleProposal) as refused:
        store.record_decision(decided(first), first.case_id, [checkpoint(first, "cp-final")])
    assert refused.value.current_operation_id == edit.operation_id
    assert store.get_decision(first.operation_id) is None
    assert rows(store, "SELECT count(*) FROM checkpoints WHERE checkpoint_id = 'cp-final'") == 0
    assert store.get_operation(first.operation_id).state is OperationState.SUPERSEDED


def test_expiry_takes_only_current_undecided_proposals_of_cases_unmoved_since_the_cutoff(
    store: OrchestratorStore,
) -> None:
    old = started(store, proposal(case_id="T-1"))
    settled = approved(store, proposal(case_id="T-2"))
    replaced = started(store, proposal(case_id="T-3"))
    edit = proposal(case_id="T-3", body="Please update to 4.2.2.", parent=replaced.operation_id)
    store.create_edit(edit, replaced.operation_id, review(edit), [checkpoint(edit)])
    recent = started(store, proposal(case_id="T-4", at=T0 + timedelta(days=10)))
    cutoff, now = T0 + timedelta(days=5), T0 + timedelta(days=35)

    assert store.housekeeping.expire_reviews(cutoff, now, dry_run=True) == 2
    assert store.get_operation(old.operation_id).state is OperationState.PENDING_REVIEW
    assert store.housekeeping.expire_reviews(cutoff, now, dry_run=False) == 2
    assert store.housekeeping.expire_reviews(cutoff, now, dry_run=False) == 0

    expired = store.get_operation(old.operation_id)
    assert (expired.state, expired.state_changed_at, expired.decision) == (OperationState.EXPIRED, now, None)
    assert store.get_operation(edit.operation_id).state is OperationState.EXPIRED
    assert store.get_operation(replaced.operation_id).state is OperationState.SUPERSEDED
    assert store.get_operation(settled.operation_id).state is OperationState.APPROVED
    assert store.get_operation(recent.operation_id).state is OperationState.PENDING_REVIEW
    inbox = store.list_pending_reviews(PendingReviewFilter(), 10, None)
    assert [entry.proposal.operation_id for entry in inbox] == [recent.operation_id]
    assert store.tally().by_state[OperationState.EXPIRED] == 2


def test_a_decision_never_lands_on_an_expired_review(store: OrchestratorStore) -> None:
    p = started(store, proposal())
    assert store.housekeeping.expire_reviews(T0 + timedelta(days=1), T0 + timedelta(days=1), dry_run=False) == 1
    # The decision of an Approve that read the review before it expired: refused, nothing written.
    for attempt in (None, FirstAttempt(b"payload", "digest", T0 + timedelta(seconds=5))):
        with pytest.raises(ReviewExpired) as refused:
            store.record_decision(decided(p), p.case_id, [checkpoint(p, "cp-final")], attempt)
        assert refused.value.operation_id == p.operation_id
    assert store.get_decision(p.operation_id) is None
    assert rows(store, "SELECT count(*) FROM checkpoints WHERE checkpoint_id = 'cp-final'") == 0
    assert store.get_operation(p.operation_id).state is OperationState.EXPIRED


def test_an_attempt_is_recorded_only_on_an_open_operation_and_keeps_its_first_payload(
    store: OrchestratorStore,
) -> None:
    pending = started(store, proposal(case_id="T-2"))
    with pytest.raises(NotRedrivable) as refused:
        store.record_attempt(pending.operation_id, b"p0", "d0", T0, T0)
    assert refused.value.metadata["state"] == "OPERATION_STATE_PENDING_REVIEW"
    assert store.get_operation(pending.operation_id).attempts == 0

    p = approved(store, proposal())
    first = store.record_attempt(p.operation_id, b"p1", "d1", T0 + timedelta(seconds=1), T0 + timedelta(seconds=1))
    assert (first.state, first.attempts, first.payload, first.payload_digest) == (
        OperationState.UNKNOWN,
        1,
        b"p1",
        "d1",
    )
    second = store.record_attempt(p.operation_id, b"p2", "d2", T0 + timedelta(seconds=2), T0 + timedelta(seconds=2))
    assert (second.attempts, second.payload, second.payload_digest) == (2, b"p1", "d1")
    assert second.first_attempt_at == T0 + timedelta(seconds=1)
    assert second.state_changed_at == T0 + timedelta(seconds=1)  # still UNKNOWN since the first attempt

    store.record_receipt(p.operation_id, Receipt("rcpt-1", OperationId(p.operation_id), T0), T0 + timedelta(seconds=3))
    with pytest.raises(NotRedrivable) as settled:
        store.record_attempt(p.operation_id, b"p3", "d3", T0 + timedelta(seconds=4), T0 + timedelta(seconds=4))
    assert settled.value.metadata["state"] == "OPERATION_STATE_COMMITTED"
    assert store.get_operation(p.operation_id).attempts == 2


def test_an_approval_and_its_first_attempt_are_one_transaction(store: OrchestratorStore) -> None:
    p = started(store, proposal())
    attempt = FirstAttempt(b"p1", "d1", T0 + timedelta(seconds=10))
    operation = store.record_decision(decided(p), p.case_id, [checkpoint(p, "cp-final")], attempt)
    assert (operation.state, operation.attempts, operation.first_attempt_at) == (OperationState.UNKNOWN, 1, T0)
    assert (operation.payload, operation.payload_digest) == (b"p1", "d1")
    assert operation.attempt_lease_until == T0 + timedelta(seconds=10)
    assert store.get_operation(p.operation_id) == operation
    # A refused decision writes no attempt either.
    other = started(store, proposal(case_id="T-3"))
    edit = proposal(case_id="T-3", body="Please update to 4.2.2.", parent=other.operation_id)
    store.create_edit(edit, other.operation_id, review(edit), [checkpoint(edit)])
    with pytest.raises(StaleProposal):
        store.record_decision(decided(other), other.case_id, [], attempt)
    stale = store.get_operation(other.operation_id)
    assert (stale.state, stale.attempts, stale.payload) == (OperationState.SUPERSEDED, 0, None)
    with pytest.raises(ValueError):
        store.record_decision(decided(other, Decision.DECLINE), other.case_id, [], attempt)


def test_an_attempt_lease_holds_the_operation_until_it_passes_or_is_released(store: OrchestratorStore) -> None:
    p = approved(store, proposal())
    held_until = T0 + timedelta(seconds=10)
    first = store.record_attempt(p.operation_id, b"p1", "d1", T0, held_until)
    assert first.attempt_lease_until == held_until
    with pytest.raises(AttemptInFlight) as held:
        store.record_attempt(p.operation_id, b"p1", "d1", T0 + timedelta(seconds=5), T0 + timedelta(seconds=15))
    assert held.value.operation.attempt_lease_until == held_until
    assert store.get_operation(p.operation_id).attempts == 1
    # Once the lease has passed (its holder crashed), the next caller takes it.
    taken_until = held_until + timedelta(seconds=10)
    after = store.record_attempt(p.operation_id, b"p1", "d1", held_until, taken_until)
    assert (after.attempts, after.attempt_lease_until) == (2, taken_until)
    # The operation a write returns (its UPDATE's RETURNING) is the one a read then finds.
    assert store.get_operation(p.operation_id) == after
    # Only the holder's own lease is released: the first holder's late release changes nothing.
    assert store.release_attempt(p.operation_id, held_until).attempt_lease_until == taken_until
    assert store.release_attempt(p.operation_id, taken_until).attempt_lease_until is None
    third = store.record_attempt(p.operation_id, b"p1", "d1", held_until, held_until + timedelta(seconds=30))
    assert third.attempts == 3
    # A receipt ends the lease with the attempt.
    committed = store.record_receipt(
        p.operation_id, Receipt("rcpt-1", OperationId(p.operation_id), T0), held_until + timedelta(seconds=1)
    )
    assert (committed.state, committed.attempt_lease_until) == (OperationState.COMMITTED, None)


def test_a_receipt_commits_an_open_operation_once(store: OrchestratorStore) -> None:
    p = approved(store, proposal())
    store.record_attempt(p.operation_id, b"p1", "d1", T0, T0)
    committed = store.record_receipt(
        p.operation_id, Receipt("rcpt-1", OperationId(p.operation_id), T0), T0 + timedelta(seconds=1)
    )
    assert (committed.state, committed.receipt) == (
        OperationState.COMMITTED,
        Receipt("rcpt-1", OperationId(p.operation_id), T0),
    )
    assert store.get_operation(p.operation_id) == committed
    later = store.record_receipt(
        p.operation_id, Receipt("rcpt-2", OperationId(p.operation_id), T0), T0 + timedelta(seconds=2)
    )
    assert later.receipt == Receipt(
        "rcpt-1", OperationId(p.operation_id), T0
    ) and later.state_changed_at == T0 + timedelta(seconds=1)
    assert store.record_rejection(p.operation_id, "too late", T0).state is OperationState.COMMITTED


def test_a_rejection_settles_an_open_operation(store: OrchestratorStore) -> None:
    p = approved(store, proposal())
    store.record_attempt(p.operation_id, b"p1", "d1", T0, T0)
    rejected = store.record_rejection(p.operation_id, "x" * 3000, T0 + timedelta(seconds=1))
    assert rejected.state is OperationState.REJECTED
    assert rejected.rejection_reason == "x" * 2000
    assert (
        store.record_receipt(p.operation_id, Receipt("rcpt-1", OperationId(p.operation_id), T0), T0).state
        is OperationState.REJECTED
    )
    with pytest.raises(NotFound):
        store.record_rejection(OperationId("op-v1-" + "0" * 64), "unknown", T0)


def test_settle_commits_open_operations_and_notes_every_lookup(store: OrchestratorStore) -> None:
    applied = approved(store, proposal(case_id="T-1"))
    missing = approved(store, proposal(case_id="T-2"))
    declined = started(store, proposal(case_id="T-3"))
    store.record_decision(decided(declined, Decision.DECLINE), declined.case_id, [])
    unknown = "op-v1-" + "f" * 64
    looked = T0 + timedelta(minutes=1)

    def lookup(op: str, status: LookupStatus, receipt: Receipt | None = None) -> Settlement:
        return Settlement(OperationId(op), status, Consistency.STRONG, receipt, "", looked)

    results = store.settle(
        [
            lookup(
                applied.operation_id, LookupStatus.APPLIED, Receipt("rcpt-1", OperationId(applied.operation_id), T0)
            ),
            lookup(missing.operation_id, LookupStatus.NOT_FOUND),
            lookup(
                declined.operation_id, LookupStatus.APPLIED, Receipt("rcpt-3", OperationId(declined.operation_id), T0)
            ),
            lookup(unknown, LookupStatus.NOT_FOUND),
        ],
        settled_by="reconciler",
    )
    assert [settled for _, settled in results] == [True, False, False, False]
    committed, noted, still_declined, absent = (operation for operation, _ in results)
    assert absent is None
    assert committed is not None and committed.state is OperationState.COMMITTED
    assert (
        committed.receipt == Receipt("rcpt-1", OperationId(applied.operation_id), T0)
        and committed.state_changed_at == looked
    )
    assert noted is not None and noted.state is OperationState.APPROVED
    assert noted.last_lookup is not None and noted.last_lookup.status is LookupStatus.NOT_FOUND
    assert noted.last_lookup.looked_up_at == looked
    assert (
        still_declined is not None
        and still_declined.state is OperationState.DECLINED
        and still_declined.receipt is None
    )
    assert store.get_operation(applied.operation_id) == committed


def test_list_operations_pages_oldest_first_and_filters_by_the_state_shown(store: OrchestratorStore) -> None:
    ops = [approved(store, proposal(case_id=f"T-{i}"), at=T0 + timedelta(seconds=i)) for i in range(5)]
    newest = approved(store, proposal(case_id="T-9"), at=T0 + timedelta(hours=1))
    before = T0 + timedelta(minutes=1)
    seen: list[str] = []
    after: tuple[datetime, OperationId] | None = None
    while True:
        page = store.list_operations([OperationState.APPROVED], before, 2, after)
        seen += [op.operation_id for op in page]
        if len(page) < 2:
            break
        after = (page[-1].state_changed_at, page[-1].operation_id)
    assert seen == [p.operation_id for p in ops]
    assert newest.operation_id not in seen

    first = started(store, proposal(case_id="T-E", at=T0))
    edit = proposal(case_id="T-E", body="Please update to 4.2.2.", parent=first.operation_id, at=T0)
    store.create_edit(edit, first.operation_id, review(edit), [])

    def listed(*states: OperationState) -> dict[str, OperationState]:
        return {op.operation_id: op.state for op in store.list_operations(states, before, 10, None)}

    # The filter matches the state each operation is shown in: SUPERSEDED is derived, not stored.
    assert listed(OperationState.PENDING_REVIEW) == {edit.operation_id: OperationState.PENDING_REVIEW}
    assert listed(OperationState.SUPERSEDED) == {first.operation_id: OperationState.SUPERSEDED}
    assert listed(OperationState.PENDING_REVIEW, OperationState.SUPERSEDED) == {
        first.operation_id: OperationState.SUPERSEDED,
        edit.operation_id: OperationState.PENDING_REVIEW,
    }


def test_list_operations_filters_by_case_and_pages_within_it(store: OrchestratorStore) -> None:
    mine = [
        approved(store, proposal(case_id="T-7", body=f"Reply {i}."), at=T0 + timedelta(seconds=i)) for i in range(3)
    ]
    other = approved(store, proposal(case_id="T-8"), at=T0)
    before = T0 + timedelta(minutes=1)

    first = store.list_operations([OperationState.APPROVED], before, 2, None, case_id=CaseId("T-7"))
    after = (first[-1].state_changed_at, first[-1].operation_id)
    rest = store.list_operations([OperationState.APPROVED], before, 2, after, case_id=CaseId("T-7"))

    assert [op.operation_id for op in first + rest] == [p.operation_id for p in mine]
    assert {op.case_id for op in first + rest} == {"T-7"}
    assert store.list_operations([OperationState.APPROVED], before, 10, None, case_id=CaseId("T-8")) == [
        store.get_operation(other.operation_id)
    ]
    assert store.list_operations([OperationState.APPROVED], before, 10, None, case_id=CaseId("T-404")) == []
    assert store.list_operations([OperationState.PENDING_REVIEW], before, 10, None, case_id=CaseId("T-7")) == []


def test_prune_deletes_only_settled_operations_checkpoints(store: OrchestratorStore) -> None:
    settled = started(store, proposal(case_id="T-1"))
    store.record_decision(decided(settled, Decision.DECLINE), settled.case_id, [checkpoint(settled, "cp-final")])
    pending = started(store, proposal(case_id="T-2"))
    housekeeping = store.housekeeping
    assert housekeeping.prune_checkpoints(T0, dry_run=True) == 0  # settled at T0, not before
    cutoff = T0 + timedelta(seconds=1)
    assert housekeeping.prune_checkpoints(cutoff, dry_run=True) == 2
    assert rows(store, "SELECT count(*) FROM checkpoints") == 3
    assert housekeeping.prune_checkpoints(cutoff, dry_run=False) == 2
    left = rows(store, "SELECT count(*) FROM checkpoints WHERE operation_id = :op", op=pending.operation_id)
    assert left == 1 and rows(store, "SELECT count(*) FROM checkpoints") == 1
    assert store.get_decision(settled.operation_id) is not None
    assert store.get_proposal(settled.operation_id) == settled


def test_prune_deletes_superseded_reviews_checkpoints_and_an_edit_back_writes_a_fresh_one(
    store: OrchestratorStore,
) -> None:
    first = started(store, proposal(case_id="T-3"))
    later = T0 + timedelta(minutes=5)
    edit = proposal(case_id="T-3", body="Please update to 4.2.2.", parent=first.operation_id, at=later)
    store.create_edit(edit, first.operation_id, review(edit), [checkpoint(edit)])
    housekeeping = store.housekeeping
    assert housekeeping.prune_checkpoints(later, dry_run=True) == 0  # the case moved at the cutoff, not before
    assert housekeeping.prune_checkpoints(later + timedelta(seconds=1), dry_run=False) == 1
    of = "SELECT count(*) FROM checkpoints WHERE operation_id = :op"
    assert rows(store, of, op=first.operation_id) == 0
    assert rows(store, of, op=edit.operation_id) == 1  # the current review's checkpoint is kept

    back = proposal(case_id="T-3", parent=edit.operation_id, at=later)
    store.create_edit(back, edit.operation_id, review(back, "cp-fresh"), [checkpoint(back, "cp-fresh")])
    assert store.get_pending_review(first.operation_id).checkpoint_id == "cp-fresh"
    assert rows(store, of, op=first.operation_id) == 1
    assert store.checkpoints.get("cp-fresh") is not None


def test_reopen_moves_an_undecided_review_to_the_running_workflow_once(store: OrchestratorStore) -> None:
    old_graph = started(store, proposal(case_id="T-1"))
    decided_old = started(store, proposal(case_id="T-2"))
    store.record_decision(decided(decided_old), decided_old.case_id, [])
    housekeeping = store.housekeeping
    found = housekeeping.reviews_outside("decisionflow.review", "2", "graph")
    assert [r.operation_id for r in found] == [old_graph.operation_id]

    old = found[0]
    new = PendingReview(old.operation_id, "decisionflow.review", "2", "graph", "cp-new", T0)
    assert housekeeping.reopen(old, new, [checkpoint(old_graph, "cp-new")])
    reopened = store.get_pending_review(old.operation_id)
    assert (reopened.checkpoint_id, reopened.retired_checkpoint_id) == ("cp-new", old.checkpoint_id)
    assert not housekeeping.reopen(old, new, [checkpoint(old_graph, "cp-newer")])
    assert rows(store, "SELECT count(*) FROM checkpoints WHERE checkpoint_id = 'cp-newer'") == 0
    assert housekeeping.reviews_outside("decisionflow.review", "2", "graph") == []
    decided_review = store.get_pending_review(decided_old.operation_id)
    assert not housekeeping.reopen(decided_review, new, [])


def test_timestamps_come_back_as_aware_utc(store: OrchestratorStore) -> None:
    elsewhere = timezone(timedelta(hours=2))
    at = datetime(2026, 11, 29, 23, 0, 0, 250000, tzinfo=elsewhere)
    p = started(store, proposal(at=at))
    store.record_decision(decided(p, at=at), p.case_id, [])
    store.record_attempt(p.operation_id, b"p1", "d1", at, at)
    operation = store.record_receipt(p.operation_id, Receipt("rcpt-1", OperationId(p.operation_id), at), at)
    inputs = store.decision_inputs(p.operation_id)
    assert inputs.checkpoint is not None and inputs.review is not None
    assert operation.decision is not None and operation.receipt is not None
    stamps = [
        store.get_proposal(p.operation_id).created_at,
        inputs.proposal.created_at,
        inputs.review.created_at,
        inputs.checkpoint.created_at,
        operation.state_changed_at,
        operation.first_attempt_at,
        operation.decision.decided_at,
        operation.receipt.applied_at,
    ]
    for stamp in stamps:
        assert stamp is not None and stamp.tzinfo is UTC
    assert all(stamp == at for stamp in stamps[:3] + stamps[4:])
    assert inputs.checkpoint.created_at == T0
    with pytest.raises(sa.exc.StatementError):
        store.record_rejection(p.operation_id, "naive", datetime(2026, 11, 29))


def test_a_counted_listing_totals_every_page_with_the_same_filters(store: OrchestratorStore) -> None:
    ops = [
        approved(store, proposal(case_id=f"T-{i % 2}", body=f"Reply {i}."), at=T0 + timedelta(seconds=i))
        for i in range(5)
    ]
    approved(store, proposal(case_id="T-9"), at=T0 + timedelta(hours=1))  # too young for before
    first = started(store, proposal(case_id="T-E", at=T0))
    edit = proposal(case_id="T-E", body="Please update to 4.2.2.", parent=first.operation_id, at=T0)
    store.create_edit(edit, first.operation_id, review(edit), [])
    before = T0 + timedelta(minutes=1)
    approved_only = [OperationState.APPROVED]

    page = store.operations_listing(approved_only, before, 2, None, counted=True)
    assert [op.operation_id for op in page.rows] == [p.operation_id for p in ops[:2]]
    assert page.total_size == 5
    # Every page counts the whole listing, not what follows its key.
    last = page.rows[-1]
    later = store.operations_listing(approved_only, before, 2, (last.state_changed_at, last.operation_id), counted=True)
    assert later.total_size == 5
    assert store.operations_listing(approved_only, before, 2, None, case_id=CaseId("T-1"), counted=True).total_size == 2
    assert store.operations_listing(approved_only, T0 + timedelta(hours=2), 2, None, counted=True).total_size == 6
    # SUPERSEDED and PENDING_REVIEW are counted as they are shown: derived from the case's pointer.
    assert store.operations_listing([OperationState.SUPERSEDED], before, 2, None, counted=True).total_size == 1
    assert store.operations_listing([OperationState.PENDING_REVIEW], before, 2, None, counted=True).total_size == 1
    assert store.operations_listing([OperationState.UNKNOWN], before, 2, None, counted=True).total_size == 0
    # Not asked: not counted, the same page.
    uncounted = store.operations_listing(approved_only, before, 2, None)
    assert uncounted.total_size is None and uncounted.rows == page.rows
