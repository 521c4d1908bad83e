"""An in-memory audit log: a fake at the seam between the AuditService and the store
(``orchestrator.audit_log.ports.AuditLogReader``), for the tests of the AuditService, the audit client and
``decisionflow audit`` only, and for the in-process stacks while the store reads no log of its own
(``tests.support.stack``), so that every RPC of the contract is served there.

It is built from the real parts: leaves are the bytes ``encode_leaf`` writes, hashed, proved and
signed (Ed25519, a C2SP signed note) by the very functions an auditor verifies with, so what it
serves verifies exactly as the store's will. It is no model of the store: no sequencer, no database,
no transactions; a test appends leaves and signs checkpoints when it wants them.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from decisionflow.identity import EvidenceItem, PolicyRef, identities
from decisionflow.timestamps import from_timestamp
from decisionflow.transparency import (
    Checkpoint,
    CompactRange,
    DecisionLeaf,
    EffectLeaf,
    Leaf,
    MalformedLeaf,
    NoteSigner,
    ProposalLeaf,
    consistency_proof,
    decode_leaf,
    encode_leaf,
    inclusion_proof,
    leaf_hash,
    sign_checkpoint,
    subtree_hashes_of_leaves,
)
from decisionflow.v1 import common_pb2, review_pb2
from decisionflow.vocabulary import CaseId, OperationId
from orchestrator.audit_log.ports import LoggedLeaf, PublishedCheckpoint

ORIGIN = "audit.test/orchestrator"


def signer_for(origin: str, label: str = "log key") -> NoteSigner:
    """A signer named origin whose seed is derived from label: the same key in every run of the tests."""
    return NoteSigner.from_seed(origin, hashlib.sha256(f"{origin} {label}".encode()).digest())


class InMemoryAuditLog:
    """AuditLogReader over leaves held in memory, with the writer's side a test needs: append and sign."""

    def __init__(
        self,
        origin: str = ORIGIN,
        signer: NoteSigner | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.origin = origin
        self.signer = signer or signer_for(origin)
        self._clock = clock
        self._lock = threading.Lock()
        self._data: list[bytes] = []
        self._hashes: list[bytes] = []
        self._range = CompactRange()
        self._operation_of: dict[int, OperationId] = {}
        self._case_of: dict[OperationId, CaseId] = {}
        self._checkpoints: dict[int, PublishedCheckpoint] = {}
        self._latest: PublishedCheckpoint | None = None

    @property
    def vkey(self) -> str:
        """The log's verifier key string: what an auditor keeps."""
        return self.signer.verifier().vkey

    @property
    def size(self) -> int:
        """How many leaves the log holds (signed or not)."""
        with self._lock:
            return len(self._data)

    def append(self, leaf: Leaf | bytes) -> int:
        """Append a leaf (or raw bytes, as a broken writer would); return its index."""
        data = leaf if isinstance(leaf, bytes) else encode_leaf(leaf)
        try:
            decoded: Leaf | None = decode_leaf(data)
        except MalformedLeaf:
            decoded = None
        with self._lock:
            index = len(self._data)
            self._data.append(data)
            self._hashes.append(leaf_hash(data))
            self._range, _ = self._range.append(self._hashes[-1])
            if decoded is not None:
                self._operation_of[index] = decoded.operation_id
                if isinstance(decoded, ProposalLeaf):
                    self._case_of.setdefault(decoded.operation_id, decoded.case_id)
            return index

    def sign(self) -> PublishedCheckpoint:
        """Sign a checkpoint of every leaf appended so far; it becomes the latest."""
        with self._lock:
            root = self._range.root()
            text = sign_checkpoint(Checkpoint(self.origin, self._range.size, root), self.signer)
            published = PublishedCheckpoint(self._range.size, root, text, self._clock())
            self._checkpoints[published.size] = published
            self._latest = published
            return published

    def latest_checkpoint(self) -> PublishedCheckpoint | None:
        """The newest signed checkpoint, None before the first."""
        with self._lock:
            return self._latest

    def checkpoint(self, size: int) -> PublishedCheckpoint | None:
        """The checkpoint signed at exactly size, None when none was."""
        with self._lock:
            return self._checkpoints.get(size)

    def leaves(self, start: int, limit: int) -> Sequence[LoggedLeaf]:
        """Up to limit leaves from index start, in index order."""
        with self._lock:
            return [LoggedLeaf(index, self._data[index]) for index in range(start, min(start + limit, len(self._data)))]

    def leaf_indices(self, operation_id: OperationId | None = None, case_id: CaseId | None = None) -> Sequence[int]:
        """The indices of the leaves of an operation, or of every operation of a case, ascending."""
        with self._lock:
            if operation_id is not None:
                return [index for index, named in self._operation_of.items() if named == operation_id]
            return [index for index, named in self._operation_of.items() if self._case_of.get(named) == case_id]

    def inclusion_proof(self, index: int, size: int) -> Sequence[bytes]:
        """The RFC 9162 inclusion proof of leaf index in the tree of the first size leaves."""
        with self._lock:
            return inclusion_proof(index, size, subtree_hashes_of_leaves(self._hashes[:size]))

    def consistency_proof(self, old_size: int, new_size: int) -> Sequence[bytes]:
        """The RFC 9162 consistency proof between the trees of old_size and new_size leaves."""
        with self._lock:
            return consistency_proof(old_size, new_size, subtree_hashes_of_leaves(self._hashes[:new_size]))


# Leaves of real content: what the store will write for a proposal, a decision and an effect.

AT = datetime(2026, 12, 4, 8, 30, tzinfo=UTC)
POLICY = PolicyRef("support-replies", "2026-10", 0, {"tone": "plain"})


def sample_proposal(
    case_id: str, body: str, *, principal: str = "ava", at: datetime = AT, quotation: str = "Fixed in 4.2.1."
) -> ProposalLeaf:
    """A started proposal's leaf whose operation id is its content's."""
    evidence = (EvidenceItem("kb-firmware-421", 3, quotation),)
    ids = identities(case_id, "record_support_review", body, evidence, POLICY)
    return ProposalLeaf(
        at,
        "started",
        principal,
        CaseId(case_id),
        ids.operation_id,
        None,
        "record_support_review",
        body,
        evidence,
        POLICY,
    )


def proposal_leaf(proposal: review_pb2.Proposal) -> ProposalLeaf:
    """The leaf of a proposal as the orchestrator answered it (GetProposal, StartReview)."""
    event = "edited" if proposal.human_edited else "replaced" if proposal.parent_operation_id else "started"
    evidence = tuple(EvidenceItem(item.source_id, item.version, item.quotation) for item in proposal.evidence)
    policy = PolicyRef(
        proposal.policy.name,
        proposal.policy.version_label,
        proposal.policy.allowance_units,
        dict(proposal.policy.rules),
    )
    return ProposalLeaf(
        from_timestamp(proposal.created_at),
        event,
        proposal.created_by,
        CaseId(proposal.case_id),
        OperationId(proposal.operation_id),
        OperationId(proposal.parent_operation_id) if proposal.parent_operation_id else None,
        proposal.action,
        proposal.body,
        evidence,
        policy,
    )


def decision_leaf(operation: review_pb2.Operation) -> DecisionLeaf:
    """The leaf of an operation's recorded decision as the orchestrator answered it (GetOperation)."""
    decision = common_pb2.Decision.Name(operation.decision).removeprefix("DECISION_")
    return DecisionLeaf(
        from_timestamp(operation.decided_at), OperationId(operation.operation_id), decision, operation.reviewer
    )


def effect_leaf(operation: review_pb2.Operation) -> EffectLeaf:
    """The leaf of an operation's receipt as the orchestrator answered it (GetOperation)."""
    receipt = operation.receipt
    applied = from_timestamp(receipt.applied_at) if receipt.HasField("applied_at") else None
    return EffectLeaf(
        from_timestamp(operation.updated_at), OperationId(operation.operation_id), receipt.receipt_id, applied
    )
