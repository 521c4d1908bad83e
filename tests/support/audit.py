"""The audit log in tests: a migrated orchestrator store of each kind, the rows its events write, a signing
key, and reading the log back (entries in entry order, decoded leaves, checkpoints checked end to end)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from decisionflow.identity import EvidenceItem, PolicyRef, identities
from decisionflow.transparency import (
    History,
    Leaf,
    NoteSigner,
    NoteVerifier,
    decode_leaf,
    leaf_hash,
    open_checkpoint,
    verify_consistency,
    verify_inclusion,
)
from decisionflow.vocabulary import CaseId, Decision, OperationId
from decisionflow_server.storage import db
from orchestrator.audit.sequencer import publish
from orchestrator.audit_log.ports import AuditLogReader, PublishedCheckpoint
from orchestrator.audit_log.signing import CheckpointSigner
from orchestrator.domain import PendingReview, Proposal, RecordedDecision, SealedCheckpoint, proposal_content
from orchestrator.schema import audit_entries
from orchestrator.store import OrchestratorStore, migrate

T0 = datetime(2026, 12, 14, 9, 0, 0, 125000, tzinfo=UTC)
POLICY = PolicyRef("support-replies", "2026-10", 9, {"max_refund_eur": "200", "tone": "plain"})
EVIDENCE = (EvidenceItem("KB-12", 2, "Update to 4.2.1."), EvidenceItem("FW-7", 1, "Known issue in 4.2.0."))
ACTION = "record_support_review"
ORIGIN = "audit.test/log"
# A fixed seed, so a failing run can be replayed with the same signatures.
SIGNER = CheckpointSigner(ORIGIN, NoteSigner.from_seed(ORIGIN, bytes(range(32))))


def publish_log(orchestrator_url: str, signer: CheckpointSigner = SIGNER) -> int:
    """Sequence the orchestrator's log backlog and sign its size with signer, as its sequencer does; the
    signed size."""
    engine = db.create_engine(orchestrator_url, pool_size=1)
    try:
        done = publish(OrchestratorStore(engine), signer, lambda: datetime.now(UTC))
    finally:
        engine.dispose()
    assert done.signed is not None
    return done.signed.size


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def audit_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OrchestratorStore]:
    """A migrated orchestrator database of each kind, behind its store."""
    url = (
        f"sqlite:///{tmp_path / 'orchestrator.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = db.create_engine(url)
    migrate(engine)
    try:
        yield OrchestratorStore(engine)
    finally:
        engine.dispose()


def proposal(
    case_id: str = "T-1",
    body: str = "Please update to 4.2.1.",
    *,
    parent: OperationId | None = None,
    edited: bool = False,
    author: str = "alex@example.com",
    at: datetime = T0,
) -> Proposal:
    """A proposal as the service builds it."""
    content = proposal_content(CaseId(case_id), ACTION, body, EVIDENCE, POLICY)
    ids = identities(content.case_id, content.action, content.body, content.evidence, content.policy)
    return Proposal(
        ids.operation_id, content, ids.evidence_id, ids.policy_id, edited, parent, author, at, frozenset({author})
    )


def review(p: Proposal, checkpoint_id: str | None = None) -> PendingReview:
    """Its pending review."""
    return PendingReview(
        p.operation_id, "decisionflow.review", "1", "graph", checkpoint_id or f"cp-{p.operation_id[-12:]}", p.created_at
    )


def sealed(p: Proposal, checkpoint_id: str | None = None) -> SealedCheckpoint:
    """A checkpoint row of its run (the seal is never checked here)."""
    checkpoint_id = checkpoint_id or f"cp-{p.operation_id[-12:]}"
    return SealedCheckpoint(checkpoint_id, "decisionflow.review", "graph", p.operation_id, T0, "key", "0" * 64, b"s")


def started(store: OrchestratorStore, p: Proposal) -> Proposal:
    """p recorded by StartReview's write."""
    stored, created = store.create_proposal(p, review(p), [sealed(p)])
    assert created
    return stored


def decision(
    p: Proposal, verdict: Decision = Decision.APPROVE, *, at: datetime = T0, reviewer: str = "rita@example.com"
) -> RecordedDecision:
    """A reviewer's decision on p."""
    return RecordedDecision(p.operation_id, verdict, reviewer, at)


@dataclass(frozen=True, slots=True)
class EntryRow:
    """One row of audit_entries, its leaf decoded."""

    entry_id: int
    leaf_index: int | None
    kind: str
    operation_id: str
    case_id: str
    recorded_at: datetime
    data: bytes
    hash: bytes

    @property
    def leaf(self) -> Leaf:
        """The leaf its bytes decode to (MalformedLeaf when they are not canonical)."""
        return decode_leaf(self.data)


def entries(store: OrchestratorStore) -> list[EntryRow]:
    """Every audit entry, in entry order."""
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(audit_entries).order_by(audit_entries.c.entry_id)).all()
    return [
        EntryRow(
            int(r.entry_id),
            None if r.leaf_index is None else int(r.leaf_index),
            r.kind,
            r.operation_id,
            r.case_id,
            r.recorded_at,
            bytes(r.leaf),
            bytes(r.leaf_hash),
        )
        for r in rows
    ]


def leaves(store: OrchestratorStore) -> list[Leaf]:
    """Every entry's leaf, in entry order."""
    return [row.leaf for row in entries(store)]


def audited(store: OrchestratorStore) -> History:
    """Every entry read, in entry order, as the auditor's history reads a log (HistoryError at the first that
    does not hold)."""
    history = History()
    for index, row in enumerate(entries(store)):
        history.read(index, row.data)
    return history


def check_log(reader: AuditLogReader, checkpoints: list[PublishedCheckpoint], vkey: str, origin: str) -> int:
    """Check a log as an auditor would, from the reader alone: each checkpoint opens with vkey and states its
    size and root, each is consistent with every earlier one, and every leaf up to the latest is included in
    it. Return the latest size."""
    verifier = NoteVerifier.from_vkey(vkey)
    opened = [open_checkpoint(c.signed_note, [verifier], origin=origin) for c in checkpoints]
    for published, checkpoint in zip(checkpoints, opened, strict=True):
        assert (checkpoint.size, checkpoint.root_hash) == (published.size, published.root_hash)
    for later_index, later in enumerate(opened):
        for earlier in opened[:later_index]:
            assert earlier.size <= later.size
            if earlier.size < later.size:
                proof = reader.consistency_proof(earlier.size, later.size)
                verify_consistency(earlier.size, later.size, proof, earlier.root_hash, later.root_hash)
            else:
                assert earlier.root_hash == later.root_hash
    latest = opened[-1]
    logged = reader.leaves(0, latest.size + 10)
    assert [leaf.index for leaf in logged][: latest.size] == list(range(latest.size))
    for leaf in logged[: latest.size]:
        proof = reader.inclusion_proof(leaf.index, latest.size)
        verify_inclusion(leaf.index, latest.size, leaf_hash(leaf.data), proof, latest.root_hash)
    return latest.size
