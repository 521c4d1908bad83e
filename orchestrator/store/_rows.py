"""Rows to frozen domain values. Column names may carry a prefix (a label in a joined select).

Timestamps arrive as aware UTC datetimes from the column type, on every backend. A proposal's row
written without its authors (see schema.proposals.authors_json) gets them from its chain of parents,
read in the caller's transaction (``proposal_row_txn``): the one conversion that reads.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from decisionflow.review_rules import ReviewRule, decode_rule, rule_digest
from decisionflow.vocabulary import CaseId, OperationId, OperationState, Receipt
from orchestrator.domain import (
    LookupNote,
    Operation,
    PendingReview,
    Proposal,
    ProposalContent,
    RecordedDecision,
    SealedCheckpoint,
    authors_from_json,
    evidence_from_json,
    policy_from_json,
)
from orchestrator.schema import proposals, review_rules
from orchestrator.store._columns import consistency_of, decision_of, lookup_of, state_of


def operation_id_of(value: str | None) -> OperationId | None:
    """Return an operation id column's value as the typed id (None stays None: a nullable column)."""
    return None if value is None else OperationId(value)


def proposal_from(
    m: sa.RowMapping, prefix: str = "", chain_authors: frozenset[str] | None = None, rule: ReviewRule | None = None
) -> Proposal:
    """Return the proposal in a row of the proposals table; chain_authors stands in for the authors
    of a row written without them (see schema.proposals.authors_json), rule is the review rule its
    rule_digest names (None: the default rule)."""
    stored = m[prefix + "authors_json"]
    authors = authors_from_json(stored) if stored is not None else chain_authors
    if authors is None:
        raise ValueError(f"proposal {m[prefix + 'operation_id']} has no stored authors and none were given")
    return Proposal(
        operation_id=OperationId(m[prefix + "operation_id"]),
        content=ProposalContent(
            CaseId(m[prefix + "case_id"]),
            m[prefix + "action"],
            m[prefix + "body"],
            evidence_from_json(m[prefix + "evidence_json"]),
            policy_from_json(m[prefix + "policy_json"]),
        ),
        evidence_id=m[prefix + "evidence_id"],
        policy_id=m[prefix + "policy_id"],
        human_edited=bool(m[prefix + "human_edited"]),
        parent_operation_id=operation_id_of(m[prefix + "parent_operation_id"]),
        created_by=m[prefix + "created_by"],
        created_at=m[prefix + "created_at"],
        authors=authors,
        rule=rule,
    )


def proposal_row_txn(conn: sa.Connection, m: sa.RowMapping, prefix: str = "") -> Proposal:
    """Return the proposal in a row of the proposals table (columns under prefix); a row written
    without its authors gets them from its chain of parents."""
    legacy = None
    if m[prefix + "authors_json"] is None:
        legacy = chain_authors_txn(conn, OperationId(m[prefix + "operation_id"]))
    digest = m[prefix + "rule_digest"]
    # A proposal under the default rule (rule_digest NULL) costs no statement more than before rules.
    return proposal_from(m, prefix, legacy, None if digest is None else rule_txn(conn, digest))


# Decoded rules by digest: a digest names its bytes for good (content-addressed), so a rule decoded
# once never needs reading again; the few rules a server meets stay well under the bound.
_DECODED_RULES: dict[str, ReviewRule] = {}
_MAX_DECODED_RULES = 4096


def rule_txn(conn: sa.Connection, digest: str) -> ReviewRule:
    """Return the review rule stored under digest; ValueError when its bytes are missing or are not the digest's."""
    rule = _DECODED_RULES.get(digest)
    if rule is not None:
        return rule
    encoded = conn.execute(
        sa.select(review_rules.c.encoded).where(review_rules.c.digest == sa.bindparam("b_digest")), {"b_digest": digest}
    ).scalar_one_or_none()
    if encoded is None:
        raise ValueError(f"review rule {digest} is not stored")
    rule = decode_rule(encoded)
    if rule_digest(rule) != digest:
        raise ValueError(f"the review rule stored under {digest} has the digest {rule_digest(rule)}")
    if len(_DECODED_RULES) >= _MAX_DECODED_RULES:
        _DECODED_RULES.clear()
    _DECODED_RULES[digest] = rule
    return rule


def chain_authors_txn(conn: sa.Connection, operation_id: OperationId) -> frozenset[str]:
    """Return who created the proposal and each proposal it was edited from or replaced, back to the first.

    Walks the parent links; used only for rows written without their authors.
    """
    first = sa.select(proposals.c.parent_operation_id, proposals.c.created_by).where(
        proposals.c.operation_id == operation_id
    )
    chain = first.cte("proposal_chain", recursive=True)
    parent = proposals.alias("parent")
    # UNION, not UNION ALL: duplicates are dropped, so even a corrupted cycle of parents ends.
    chain = chain.union(
        sa.select(parent.c.parent_operation_id, parent.c.created_by).where(
            parent.c.operation_id == chain.c.parent_operation_id
        )
    )
    return frozenset(conn.execute(sa.select(chain.c.created_by)).scalars())


def review_from(m: sa.RowMapping, prefix: str = "") -> PendingReview:
    """Return the pending review in a row of the pending_reviews table."""
    return PendingReview(
        OperationId(m[prefix + "operation_id"]),
        m[prefix + "workflow_name"],
        m[prefix + "workflow_version"],
        m[prefix + "graph_signature"],
        m[prefix + "checkpoint_id"],
        m[prefix + "created_at"],
        m[prefix + "retired_checkpoint_id"],
    )


def decision_from(m: sa.RowMapping) -> RecordedDecision:
    """Return the recorded decision in a row holding the decisions table's columns."""
    return RecordedDecision(OperationId(m["operation_id"]), decision_of(m["decision"]), m["reviewer"], m["decided_at"])


def sealed_checkpoint_from(m: sa.RowMapping, prefix: str = "") -> SealedCheckpoint:
    """Return the still-sealed checkpoint in a row of the checkpoints table.

    Column values are passed on as stored, even of the wrong type (SQLite keeps text in a
    binary column): verification refuses such a row, and a read that does not need the
    checkpoint (a replayed decision) is not failed by it.
    """
    state = m[prefix + "state"]
    return SealedCheckpoint(
        m[prefix + "checkpoint_id"],
        m[prefix + "workflow_name"],
        m[prefix + "graph_signature"],
        OperationId(m[prefix + "operation_id"]),
        m[prefix + "created_at"],
        _ascii_text(m[prefix + "key_id"]),
        _ascii_text(m[prefix + "mac"]),
        bytes(state) if isinstance(state, memoryview | bytearray) else state,
    )


def _ascii_text(value: Any) -> Any:
    """Return a seal column read as raw bytes (SQLite) as text when it is ASCII, else as it came."""
    if isinstance(value, memoryview | bytearray | bytes):
        raw = bytes(value)
        return raw.decode("ascii") if raw.isascii() else raw
    return value


def operation_from(row: sa.Row[Any]) -> Operation:
    """Return the operation in a row of the operations select (with decision and current proposal)."""
    m = row._mapping
    operation_id = OperationId(m["operation_id"])
    state = state_of(m["state"])
    # SUPERSEDED is not stored: a pending review whose case has moved on to a newer proposal.
    if state is OperationState.PENDING_REVIEW and m["current_operation_id"] != operation_id:
        state = OperationState.SUPERSEDED
    decision = None if m["decision"] is None else decision_from(m)
    receipt = None
    if m["receipt_id"] is not None:
        receipt = Receipt(m["receipt_id"], operation_id, m["receipt_applied_at"])
    lookup = None
    if m["last_lookup_at"] is not None:
        lookup = LookupNote(
            m["last_lookup_at"],
            lookup_of(m["last_lookup_status"]),
            consistency_of(m["last_lookup_consistency"]),
            m["last_lookup_error"] or "",
        )
    return Operation(
        operation_id=operation_id,
        case_id=CaseId(m["case_id"]),
        state=state,
        state_changed_at=m["state_changed_at"],
        decision=decision,
        attempts=int(m["attempts"]),
        first_attempt_at=m["first_attempt_at"],
        receipt=receipt,
        rejection_reason=m["rejection_reason"],
        last_lookup=lookup,
        payload=None if m["payload"] is None else bytes(m["payload"]),
        payload_digest=m["payload_digest"],
        attempt_lease_until=m["attempt_lease_until"],
        attempt_lease_holder=m["attempt_lease_holder"],
        rerouted_at=m["rerouted_at"],
    )
