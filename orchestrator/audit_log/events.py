"""The leaf each event that changes what a case means writes to the audit log, from what its
transaction stores (docs/audit-log.md, "The log in the orchestrator").

Pure: the store builds the leaf here and inserts it in the event's own transaction. Each leaf's
time is the time the event's rows record (a proposal's ``created_at``, a decision's ``decided_at``,
an operation's ``state_changed_at``), and its principal the one they record (``created_by``,
``reviewer``), or, where no row keeps one, the caller the event was made by.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from decisionflow.transparency import (
    DecisionLeaf,
    EffectLeaf,
    ExpiryLeaf,
    Leaf,
    ProposalLeaf,
    RejectionLeaf,
    SettlementLeaf,
    encode_leaf,
    leaf_hash,
)
from decisionflow.vocabulary import CaseId, OperationId, Receipt
from orchestrator.domain import Operation, Proposal, RecordedDecision

T = TypeVar("T")

STARTED = "started"
EDITED = "edited"
REPLACED = "replaced"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One leaf as the log stores it: its bytes, their leaf hash, and the ids it is found by."""

    data: bytes
    hash: bytes
    kind: str
    operation_id: OperationId
    case_id: CaseId
    recorded_at: datetime

    @classmethod
    def of(cls, leaf: Leaf, kind: str, case_id: CaseId) -> AuditEntry:
        """The entry of leaf, an event of case_id's."""
        data, digest = encoded(leaf)
        return cls(data, digest, kind, leaf.operation_id, case_id, leaf.recorded_at)


def encoded(leaf: Leaf) -> tuple[bytes, bytes]:
    """The leaf's canonical bytes and their leaf hash, as its entry stores them."""
    data = encode_leaf(leaf)
    return data, leaf_hash(data)


def proposal_entry(
    proposal: Proposal, event: str, principal: str, at: datetime, previous: OperationId | None
) -> AuditEntry:
    """A proposal that became its case's current one: started (previous None), replaced or edited
    from previous, by principal at at, with the whole content its operation id is computed from and
    the review rule it follows (none written: the default rule)."""
    content = proposal.content
    leaf = ProposalLeaf(
        at,
        event,
        principal,
        content.case_id,
        proposal.operation_id,
        previous,
        content.action,
        content.body,
        content.evidence,
        content.policy,
        proposal.rule,
    )
    return AuditEntry.of(leaf, "proposal", content.case_id)


def decision_leaf(decided: RecordedDecision) -> DecisionLeaf:
    """A decision as the ledger records it."""
    return DecisionLeaf(decided.decided_at, decided.operation_id, decided.decision.value, decided.reviewer)


def decision_entry(decided: RecordedDecision, case_id: CaseId) -> AuditEntry:
    """The entry of a decision as the ledger records it."""
    return AuditEntry.of(decision_leaf(decided), "decision", case_id)


def effect_leaf(at: datetime, operation_id: OperationId, receipt: Receipt) -> EffectLeaf:
    """An operation COMMITTED at at with the receiver's receipt, from the values its row is given: the
    leaf is known before the statement that stores them runs."""
    return EffectLeaf(at, operation_id, receipt.receipt_id, receipt.applied_at)


def effect_entry(operation: Operation) -> AuditEntry:
    """The entry of an operation COMMITTED with the receiver's receipt, as its row now holds them."""
    receipt = _stored(operation.receipt, operation, "a receipt")
    leaf = effect_leaf(operation.state_changed_at, operation.operation_id, receipt)
    return AuditEntry.of(leaf, "effect", operation.case_id)


def rejection_entry(operation: Operation) -> AuditEntry:
    """An operation REJECTED: the receiver's definite refusal, with the reason as its row holds it."""
    reason = _stored(operation.rejection_reason, operation, "a rejection reason")
    leaf = RejectionLeaf(operation.state_changed_at, operation.operation_id, reason)
    return AuditEntry.of(leaf, "rejection", operation.case_id)


def settlement_entry(operation: Operation, principal: str) -> AuditEntry:
    """An operation that principal's call settled, in the state, at the time and with the receipt its row now
    holds."""
    receipt = _stored(operation.receipt, operation, "a receipt")
    leaf = SettlementLeaf(
        operation.state_changed_at,
        operation.operation_id,
        operation.state.value,
        principal,
        receipt.receipt_id,
        receipt.applied_at,
    )
    return AuditEntry.of(leaf, "settlement", operation.case_id)


def expiry_entry(operation_id: OperationId, case_id: CaseId, at: datetime) -> AuditEntry:
    """An abandoned review moved to EXPIRED at at."""
    return AuditEntry.of(ExpiryLeaf(at, operation_id), "expiry", case_id)


def _stored(value: T | None, operation: Operation, what: str) -> T:
    if value is None:
        raise ValueError(f"{operation.operation_id} is {operation.state.value} without {what}")
    return value
