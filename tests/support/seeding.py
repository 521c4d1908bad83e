"""Seeding decided operations through the stores' public methods, for volume tests and the benchmark.

Each seeded operation goes through exactly the calls the orchestrator makes itself:
``create_proposal`` (a real identity from ``decisionflow.identity``), ``record_decision``
(APPROVE) and, for UNKNOWN operations, ``record_attempt`` with the payload the commit step
would have sent (``orchestrator.domain.effect_payload``). Receiver effects go through
``EffectStore.apply`` after the receiver's own ``check_effect``, as a committed Apply whose reply
was lost would have left them. Nothing else is faked: the reconciler then talks to real servers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from decisionflow.identity import EvidenceItem, PolicyRef, identities
from decisionflow.vocabulary import CaseId, Decision, EffectRequest, OperationId, OperationState, Receipt
from decisionflow_server.storage import db
from effect_receiver.domain import Effect, check_effect
from effect_receiver.store import EffectStore
from effect_receiver.store import migrate as migrate_receiver
from orchestrator.domain import PendingReview, Proposal, ProposalContent, RecordedDecision, effect_payload
from orchestrator.store import OrchestratorStore
from orchestrator.store import migrate as migrate_orchestrator

ACTION = "record_support_review"
REVIEWER = "rita@example.com"
AUTHOR = "alex@example.com"
POLICY = PolicyRef("support-replies", "2026-10", 9, {})
EVIDENCE = (EvidenceItem("KB-12", 1, "Update to 4.2.1."),)
# A decided review is never resumed, so its pending review names no stored checkpoint.
SEEDED_WORKFLOW = ("decisionflow.review", "1", "seeded", "seeded")


def seeding_engine(url: str) -> sa.Engine:
    """An engine for seeding: the services' own, without a disk sync per commit on SQLite."""
    engine = db.create_engine(url, pool_size=1)
    if db.is_sqlite(engine):
        # Seeded rows need not survive a power cut; a sync per commit would make seeding
        # thousands of operations take minutes on a busy disk.
        @sa.event.listens_for(engine, "connect")
        def _no_sync(dbapi_connection: Any, record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA synchronous=OFF")
            cursor.close()

    return engine


@dataclass(frozen=True, slots=True)
class SeededOperation:
    """One seeded operation: its ids, the payload its attempt carried, and its decision time."""

    operation_id: OperationId
    case_id: CaseId
    body: str
    payload: bytes
    payload_digest: str
    decided_at: datetime


def proposal_for(case_id: str, body: str, created_at: datetime, *, created_by: str = AUTHOR) -> Proposal:
    """The proposal StartReview would store for case_id and body (the seeder's evidence and policy)."""
    ids = identities(case_id, ACTION, body, EVIDENCE, POLICY)
    content = ProposalContent(CaseId(case_id), ACTION, body, EVIDENCE, POLICY)
    return Proposal(
        ids.operation_id,
        content,
        ids.evidence_id,
        ids.policy_id,
        False,
        None,
        created_by,
        created_at,
        frozenset({created_by}),
    )


def seed_decided(
    store: OrchestratorStore,
    proposal: Proposal,
    decided_at: datetime,
    *,
    reviewer: str = REVIEWER,
    attempted_at: datetime | None = None,
) -> SeededOperation:
    """Record proposal, its approval at decided_at and, if attempted_at is given, one Apply attempt."""
    name, version, signature, checkpoint_id = SEEDED_WORKFLOW
    review = PendingReview(proposal.operation_id, name, version, signature, checkpoint_id, proposal.created_at)
    store.create_proposal(proposal, review, ())
    decision = RecordedDecision(proposal.operation_id, Decision.APPROVE, reviewer, decided_at)
    store.record_decision(decision, proposal.case_id, ())
    payload, digest = effect_payload(proposal, decision)
    if attempted_at is not None:
        # Its lease passed with the attempt: as if its holder crashed long ago.
        store.record_attempt(proposal.operation_id, payload, digest, attempted_at, attempted_at)
    return SeededOperation(proposal.operation_id, proposal.case_id, proposal.content.body, payload, digest, decided_at)


def seed_operations(
    orchestrator_url: str,
    count: int,
    *,
    state: OperationState = OperationState.UNKNOWN,
    decided_at: datetime | None = None,
    first_attempt_at: datetime | None = None,
    case_prefix: str | None = None,
) -> list[SeededOperation]:
    """Seed count decided operations in state (UNKNOWN: one attempt recorded; APPROVED: none).

    The i-th operation is decided (and attempted) i milliseconds after the first, the last at
    decided_at (default: a minute ago), as a stream of approvals would leave them.
    """
    assert state in (OperationState.UNKNOWN, OperationState.APPROVED)
    last_decided = decided_at or datetime.now(UTC) - timedelta(minutes=1)
    last_attempt = first_attempt_at or last_decided
    prefix = case_prefix or "R-" + uuid.uuid4().hex[:8]
    engine = seeding_engine(orchestrator_url)
    try:
        migrate_orchestrator(engine)
        store = OrchestratorStore(engine)
        seeded = []
        for i in range(count):
            earlier = timedelta(milliseconds=count - 1 - i)
            decided, attempted = last_decided - earlier, last_attempt - earlier
            body = f"Known firmware issue; please update to 4.2.1 (reply {i})."
            proposal = proposal_for(f"{prefix}-{i}", body, decided - timedelta(minutes=5))
            seeded.append(
                seed_decided(
                    store, proposal, decided, attempted_at=attempted if state is OperationState.UNKNOWN else None
                )
            )
    finally:
        engine.dispose()
    return seeded


def seed_effects(receiver_url: str, seeded: Iterable[SeededOperation]) -> dict[str, str]:
    """Apply the effect of each seeded operation at the receiver; return receipt ids by operation id."""
    applied_at = datetime.now(UTC)
    receipts: dict[str, str] = {}
    engine = seeding_engine(receiver_url)
    try:
        migrate_receiver(engine)
        store = EffectStore(engine)
        for s in seeded:
            request = EffectRequest(s.operation_id, s.case_id, ACTION, s.payload, s.payload_digest)
            effect = check_effect(request)
            assert isinstance(effect, Effect), effect
            answer = store.apply(effect, Receipt("rcpt-" + uuid.uuid4().hex, s.operation_id, applied_at))
            receipts[s.operation_id] = answer.receipt.receipt_id
    finally:
        engine.dispose()
    return receipts
