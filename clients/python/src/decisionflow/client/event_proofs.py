"""Proving an event of the feed against a checkpoint the caller trusts (docs/events.md, "Acting only on proven
events"): ``verify_event`` checks the event's inclusion proof and that it says what its leaf says."""

from __future__ import annotations

from typing import Any

from decisionflow.client.audit_views import InclusionProofs
from decisionflow.client.events import EventView
from decisionflow.transparency import (
    Checkpoint,
    DecisionLeaf,
    EffectLeaf,
    EscalationLeaf,
    ExpiryLeaf,
    HistoryError,
    InvalidTreeRange,
    Leaf,
    NotProven,
    ProposalLeaf,
    RejectionLeaf,
    RerouteLeaf,
    SettlementLeaf,
    TransparencyError,
    VoteLeaf,
    decode_leaf,
    leaf_hash,
    verify_inclusion,
)

_LEAF_KINDS: dict[type[Any], str] = {
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


def verify_event(event: EventView, proofs: InclusionProofs, checkpoint: Checkpoint) -> Leaf:
    """Return the event's leaf, decoded from its own bytes, once its inclusion proof holds against checkpoint
    (one the caller opened with the log's verifier key) and the event's kind, operation and time are the
    leaf's. Raises a ``TransparencyError``: ``InvalidTreeRange`` (proofs of another size), ``NotProven`` (no
    proof of the event's index), ``ProofError`` (the proof does not lead to the root), ``HistoryError``
    (the proof is of other bytes, or the event says what its leaf does not)."""
    if proofs.tree_size != checkpoint.size:
        raise InvalidTreeRange(
            f"the proofs are of a tree of {proofs.tree_size} leaves, the checkpoint of {checkpoint.size}"
        )
    proof = next((one for one in proofs.proofs if one.leaf.index == event.index), None)
    if proof is None:
        raise NotProven(f"no proof of leaf {event.index} in the tree of {checkpoint.size} leaves")
    if proof.leaf.data != event.leaf:
        raise HistoryError(event.index, "the proof is of other bytes than the event's leaf")
    verify_inclusion(event.index, checkpoint.size, leaf_hash(event.leaf), proof.hashes, checkpoint.root_hash)
    try:
        leaf = decode_leaf(event.leaf)
    except TransparencyError as exc:
        raise HistoryError(event.index, f"does not decode: {exc}") from exc
    told = (event.kind, event.operation_id, event.occurred_at)
    if told != (_LEAF_KINDS[type(leaf)], leaf.operation_id, leaf.recorded_at):
        raise HistoryError(event.index, f"the event says {told}, its leaf another kind, operation or time")
    return leaf
