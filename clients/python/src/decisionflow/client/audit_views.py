"""What the audit client returns (frozen dataclasses, never pb2 messages), and ``verify_operation``: the
check a caller makes that the log holds its own operation, against a checkpoint it trusts.

Nothing here is to be believed as it arrives: a ``SignedCheckpoint`` is opened with the log's
verifier key (``decisionflow.transparency.open_checkpoint``), and each proof is checked against the
root of that opened checkpoint::

    checkpoint = open_checkpoint(proofs.checkpoint.signed_note, [log_key], origin=log_origin)
    logged = verify_operation(operation_id, proofs, checkpoint)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from decisionflow.transparency import (
    Checkpoint,
    History,
    HistoryError,
    InvalidTreeRange,
    LoggedOperation,
    NotProven,
    leaf_hash,
    verify_inclusion,
)
from decisionflow.vocabulary import Decision, OperationId

__all__ = [
    "AuditLeaf",
    "ConsistencyProof",
    "InclusionProofs",
    "LeafInclusion",
    "LoggedOperation",
    "SignedCheckpoint",
    "verify_operation",
]


@dataclass(frozen=True, slots=True)
class SignedCheckpoint:
    """A checkpoint as the log published it: unverified until opened with the log's verifier key."""

    tree_size: int
    root_hash: bytes
    signed_note: str
    signed_at: datetime | None


@dataclass(frozen=True, slots=True)
class AuditLeaf:
    """One leaf of the log: its index and canonical bytes (decisionflow.transparency.decode_leaf reads them)."""

    index: int
    data: bytes


@dataclass(frozen=True, slots=True)
class LeafInclusion:
    """A leaf and its RFC 9162 inclusion proof in the tree of the answer's size."""

    leaf: AuditLeaf
    hashes: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class InclusionProofs:
    """Inclusion proofs in the tree of tree_size leaves, in index order, and the checkpoint signed at it."""

    tree_size: int
    checkpoint: SignedCheckpoint | None
    proofs: tuple[LeafInclusion, ...]


@dataclass(frozen=True, slots=True)
class ConsistencyProof:
    """The proof that the tree of new_size leaves extends the tree of old_size, and the checkpoint at new_size."""

    old_size: int
    new_size: int
    hashes: tuple[bytes, ...]
    checkpoint: SignedCheckpoint | None


def verify_operation(
    operation_id: str, proofs: InclusionProofs, checkpoint: Checkpoint, *, decision: Decision | None = None
) -> LoggedOperation:
    """Return the operation as the log tells it, once every proof holds against the trusted checkpoint's root.

    checkpoint is one the caller opened itself with the log's verifier key. Raises a
    ``TransparencyError``: ``InvalidTreeRange`` when the proofs are of another tree size, a
    ``ProofError`` when a proof does not lead to the root, ``HistoryError`` (naming the leaf) when a
    leaf does not decode, names another operation, or breaks the log's rules (its proposal's content
    must yield the id; one decision, after the proposal), ``NotProven`` when no proposal is proven
    or, with decision given, the log does not hold that decision of the operation.
    """
    if proofs.tree_size != checkpoint.size:
        raise InvalidTreeRange(
            f"the proofs are of a tree of {proofs.tree_size} leaves, the checkpoint of {checkpoint.size}"
        )
    history = History()
    for proof in proofs.proofs:
        verify_inclusion(
            proof.leaf.index, checkpoint.size, leaf_hash(proof.leaf.data), proof.hashes, checkpoint.root_hash
        )
        leaf = history.read(proof.leaf.index, proof.leaf.data)
        if leaf.operation_id != operation_id:
            raise HistoryError(proof.leaf.index, f"names {leaf.operation_id}, not {operation_id}")
    logged = history.operations.get(OperationId(operation_id))
    if logged is None:
        raise NotProven(f"no proposal of {operation_id} is proven in the tree of {checkpoint.size} leaves")
    if decision is not None and (logged.decision is None or logged.decision.decision != decision.value):
        found = "none" if logged.decision is None else logged.decision.decision
        raise NotProven(f"the log holds decision {found} of {operation_id}, not {decision.value}")
    return logged
