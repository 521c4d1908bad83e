"""What the orchestrator store's model machines share (tests/stores/test_orchestrator_store_model.py and
tests/stores/test_review_rules_store_model.py): the cases, authors and reviewers they draw from, the
proposals and checkpoints they build, the refusal a store exception is in the model's terms, and a machine
that runs each write on the store and on the model side by side and, after every step, checks the whole
table of operations, the tally, the inbox and the audit log's entries against the model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis.stateful import RuleBasedStateMachine, invariant

from decisionflow.identity import EvidenceItem, PolicyRef, identities
from decisionflow.review_rules import ReviewRule
from decisionflow.transparency import (
    DecisionLeaf,
    EffectLeaf,
    EscalationLeaf,
    ExpiryLeaf,
    ProposalLeaf,
    RejectionLeaf,
    RerouteLeaf,
    SettlementLeaf,
    VoteLeaf,
    decode_leaf,
    encode_leaf,
    leaf_hash,
)
from decisionflow.vocabulary import CaseId, OperationId, OperationState
from orchestrator.domain import PendingReview, PendingReviewFilter, Proposal, SealedCheckpoint, proposal_content
from orchestrator.schema import audit_entries, metadata
from orchestrator.store import OrchestratorStore
from tests.stores.orchestrator_model import Refused, StoreModel
from tests.support.databases import empty_tables

T0 = datetime(2026, 12, 1, 9, 0, 0, 125000, tzinfo=UTC)
FAR_FUTURE = datetime(2100, 1, 1, tzinfo=UTC)
CASES = ("T-1", "T-2", "T-3", "T-4")
BODIES = ("Please update to 4.2.1.", "Please update to 4.2.2.", "Please reinstall 4.2.1.")
AUTHORS = ("alex@example.com", "bo@example.com", "cy@example.com")
REVIEWERS = ("rita@example.com", "ravi@example.com", "dora@example.com")
HOLDERS = ("host-a:101:i1", "host-b:202:i2")
POLICY = PolicyRef("support-replies", "2026-10", 9, {"max_refund_eur": "200"})
ACTION = "record_support_review"
STATES = tuple(OperationState)
# The kind column each leaf is stored with.
KINDS = {
    ProposalLeaf: "proposal",
    DecisionLeaf: "decision",
    EffectLeaf: "effect",
    RejectionLeaf: "rejection",
    SettlementLeaf: "settlement",
    ExpiryLeaf: "expiry",
    VoteLeaf: "vote",
    EscalationLeaf: "escalation",
    RerouteLeaf: "reroute",
}


def proposal(
    case_id: str, body: str, author: str, at: datetime, parent: str | None, edited: bool, rule: ReviewRule | None = None
) -> Proposal:
    """A proposal of body for case_id, by author at at (its parent named for a replacement or an edit), under
    rule (None: the default rule)."""
    evidence = (EvidenceItem("KB-12", 1 + BODIES.index(body) % 2, "Update to 4.2.1."),)
    content = proposal_content(CaseId(case_id), ACTION, body, evidence, POLICY)
    ids = identities(content.case_id, content.action, content.body, content.evidence, content.policy)
    parent_id = None if parent is None else OperationId(parent)
    return Proposal(
        ids.operation_id, content, ids.evidence_id, ids.policy_id, edited, parent_id, author, at, frozenset(), rule
    )


def sealed(checkpoint_id: str, operation_id: OperationId, at: datetime) -> SealedCheckpoint:
    """A checkpoint row (its seal is never checked here)."""
    return SealedCheckpoint(checkpoint_id, "decisionflow.review", "graph", operation_id, at, "key", "0" * 64, b"state")


def refusal(exc: Exception) -> Refused:
    """The refusal a store exception is, in the model's terms."""
    values: dict[str, tuple[object, ...]] = {
        "NotFound": (getattr(exc, "what", None), getattr(exc, "ident", None)),
        "StaleProposal": (getattr(exc, "operation_id", None), getattr(exc, "current_operation_id", None)),
        "CaseHasOpenProposal": (getattr(exc, "case_id", None), getattr(exc, "current_operation_id", None)),
        "DecisionAlreadyRecorded": (getattr(exc, "recorded", None),),
        "NotRedrivable": (getattr(exc, "operation_id", None), getattr(exc, "state", None)),
        "AttemptInFlight": (getattr(exc, "operation", None),),
        "VoteAlreadyCast": (getattr(exc, "vote", None),),
        "ReviewExpired": (getattr(exc, "operation_id", None),),
        "ReviewRerouted": (getattr(exc, "operation_id", None),),
    }
    kind = type(exc).__name__
    if kind not in values:
        raise exc
    return Refused(kind, *values[kind])


class StoreMachine(RuleBasedStateMachine):
    """The store and a model side by side: helpers for the rules of a machine, and the checks after every step."""

    store: OrchestratorStore
    model: StoreModel

    def __init__(self) -> None:
        super().__init__()
        empty_tables(self.store.engine, metadata)
        self.model = self.new_model()
        self.now = T0
        self.checkpoint_serial = 0

    def new_model(self) -> StoreModel:
        """The empty model this machine runs beside the store."""
        return StoreModel()

    def tick(self, seconds: int) -> datetime:
        self.now += timedelta(seconds=seconds, microseconds=seconds * 1111)
        return self.now

    def checkpoint_ids(self, n: int) -> list[str]:
        self.checkpoint_serial += n
        return [f"cp-{self.checkpoint_serial - i}" for i in range(n)]

    def both(self, write: Any, expect: Any) -> Any:
        """Run write on the store and expect on the model; both answer alike or both refuse alike."""
        try:
            wanted = expect()
        except Refused as refused:
            with pytest.raises(Exception) as raised:
                write()
            got = refusal(raised.value)
            assert (got.kind, got.values) == (refused.kind, refused.values)
            return None
        answer = write()
        assert answer == wanted
        return answer

    def review(self, p: Proposal, checkpoint_id: str) -> PendingReview:
        return PendingReview(p.operation_id, "decisionflow.review", "1", "graph", checkpoint_id, p.created_at)

    def fresh(self, operation_id: OperationId) -> None:
        """A fresh read of the operation and of its decision inputs equals the model."""
        operation = self.model.operation(operation_id)
        assert self.store.get_operation(operation_id) == operation
        inputs = self.store.decision_inputs(operation_id)
        assert inputs.operation == operation
        assert inputs.proposal == self.model.proposals[operation_id]
        assert inputs.current_operation_id == self.model.current(operation.case_id)
        review = self.model.reviews.get(operation_id)
        assert inputs.review == review
        held = review is not None and review.checkpoint_id in self.model.checkpoints
        assert (inputs.checkpoint is not None) == held
        if held and inputs.checkpoint is not None and review is not None:
            assert inputs.checkpoint.checkpoint_id == review.checkpoint_id

    def operation_ids(self) -> list[OperationId]:
        return [OperationId(op) for op in sorted(self.model.operations)]

    # After every step: the whole store equals the model.

    @invariant()
    def operations_tally_and_inbox_match(self) -> None:
        assert self.store.list_operations(STATES, FAR_FUTURE, 10_000, None) == self.model.all_operations()
        assert self.store.tally() == self.model.tally()
        assert self.store.list_pending_reviews(PendingReviewFilter(), 10_000, None) == self.model.pending_reviews()
        for case in CASES:
            assert self.store.current_operation_id(CaseId(case)) == self.model.current(case)

    @invariant()
    def audit_log_matches(self) -> None:
        with self.store.engine.connect() as conn:
            rows = conn.execute(sa.select(audit_entries).order_by(audit_entries.c.entry_id)).all()
        assert [decode_leaf(bytes(row.leaf)) for row in rows] == self.model.leaves
        assert [bytes(row.leaf_hash) for row in rows] == [leaf_hash(encode_leaf(leaf)) for leaf in self.model.leaves]
        kinds = [KINDS[type(leaf)] for leaf in self.model.leaves]
        assert [row.kind for row in rows] == kinds
        assert [row.operation_id for row in rows] == [leaf.operation_id for leaf in self.model.leaves]
        cases = [self.model.operations[leaf.operation_id].case_id for leaf in self.model.leaves]
        assert [row.case_id for row in rows] == cases
