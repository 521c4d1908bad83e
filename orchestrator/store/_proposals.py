"""Proposals, their pending reviews and the case's current-proposal pointer (joining a caller's transaction).

A proposal is inserted once per operation id (the primary key); the case's current pointer
moves only by compare-and-set, and a new proposal takes a case only when the case has none, its
current proposal is decided, or the caller names the current proposal it replaces.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from decisionflow.vocabulary import CaseId, OperationId
from orchestrator.domain import (
    PendingReview,
    Proposal,
    authors_to_json,
    carry_authors,
    evidence_to_json,
    policy_to_json,
)
from orchestrator.errors import CaseHasOpenProposal, NotFound, StaleProposal
from orchestrator.schema import operations, pending_reviews, proposals
from orchestrator.store import _statements as q
from orchestrator.store._rows import operation_id_of, proposal_from, review_from


def insert_proposal_row_txn(conn: sa.Connection, proposal: Proposal) -> Proposal:
    """Insert the proposal's own row with its authors carried from its parent (read in this
    transaction) and return it as stored; an IntegrityError here may mean the operation id exists."""
    parent = None if proposal.parent_operation_id is None else find_proposal_txn(conn, proposal.parent_operation_id)
    proposal = carry_authors(proposal, parent)
    content = proposal.content
    conn.execute(
        q.INSERT_PROPOSAL,
        {
            "operation_id": proposal.operation_id,
            "case_id": content.case_id,
            "action": content.action,
            "body": content.body,
            "evidence_json": evidence_to_json(content.evidence),
            "evidence_id": proposal.evidence_id,
            "policy_json": policy_to_json(content.policy),
            "policy_id": proposal.policy_id,
            "human_edited": proposal.human_edited,
            "parent_operation_id": proposal.parent_operation_id,
            "created_by": proposal.created_by,
            "created_at": proposal.created_at,
            "authors_json": authors_to_json(proposal.authors),
        },
    )
    return proposal


def insert_operation_and_review_txn(conn: sa.Connection, proposal: Proposal, review: PendingReview) -> None:
    """Insert the new proposal's operation (PENDING_REVIEW) and its pending review."""
    conn.execute(
        q.INSERT_OPERATION,
        {
            "operation_id": proposal.operation_id,
            "case_id": proposal.case_id,
            "state": q.PENDING_REVIEW,
            "state_changed_at": proposal.created_at,
            "attempts": 0,
        },
    )
    conn.execute(
        q.INSERT_REVIEW,
        {
            "operation_id": review.operation_id,
            "workflow_name": review.workflow_name,
            "workflow_version": review.workflow_version,
            "graph_signature": review.graph_signature,
            "checkpoint_id": review.checkpoint_id,
            "created_at": review.created_at,
        },
    )


def start_allowed_txn(
    conn: sa.Connection, case_id: CaseId, expected_operation_id: OperationId | None
) -> OperationId | None:
    """Return the case's current proposal if new content may take the case from it (None: no case yet).

    Named (expected_operation_id): it must be the current one, else StaleProposal. Not named: the
    current one, if any, must be decided, else CaseHasOpenProposal.
    """
    current = current_txn(conn, case_id)
    if expected_operation_id is not None:
        if current != expected_operation_id:
            raise StaleProposal(expected_operation_id, current or "")
        return current
    if current is not None and _undecided_txn(conn, current):
        raise CaseHasOpenProposal(case_id, current)
    return current


def insert_case_txn(conn: sa.Connection, case_id: CaseId, operation_id: OperationId, now: datetime) -> None:
    """Create the case with operation_id current; an IntegrityError means another proposal created it first."""
    conn.execute(q.INSERT_CASE, {"case_id": case_id, "current_operation_id": operation_id, "updated_at": now})


def _undecided_txn(conn: sa.Connection, operation_id: OperationId) -> bool:
    state = conn.execute(q.STATE_BY_ID, {"b_operation_id": operation_id}).scalar_one()
    return bool(state == q.PENDING_REVIEW)


def move_current_txn(
    conn: sa.Connection, case_id: CaseId, expected: OperationId, operation_id: OperationId, now: datetime
) -> bool:
    """Move the case's current pointer from expected to operation_id; False when expected is not current."""
    moved = conn.execute(
        q.MOVE_CURRENT, {"b_case_id": case_id, "b_expected": expected, "b_new": operation_id, "b_now": now}
    ).rowcount
    return bool(moved == 1)


def renew_review_txn(conn: sa.Connection, review: PendingReview) -> bool:
    """Point an undecided proposal's pending review at a freshly written checkpoint, retiring the old
    one (which pruning may have removed while the proposal was superseded); False if it is decided."""
    renewed = conn.execute(
        pending_reviews.update()
        .where(
            pending_reviews.c.operation_id == review.operation_id,
            sa.exists().where(
                operations.c.operation_id == review.operation_id,
                operations.c.state == q.PENDING_REVIEW,
            ),
        )
        .values(
            workflow_name=review.workflow_name,
            workflow_version=review.workflow_version,
            graph_signature=review.graph_signature,
            checkpoint_id=review.checkpoint_id,
            retired_checkpoint_id=pending_reviews.c.checkpoint_id,
        )
    ).rowcount
    return bool(renewed == 1)


def current_txn(conn: sa.Connection, case_id: CaseId) -> OperationId | None:
    """Return the operation id of the case's current proposal, if the case exists."""
    return operation_id_of(conn.execute(q.CURRENT_OF_CASE, {"b_case_id": case_id}).scalar_one_or_none())


def find_proposal_txn(conn: sa.Connection, operation_id: OperationId) -> Proposal | None:
    """Return the proposal with that operation id, if there is one."""
    row = conn.execute(q.PROPOSAL_BY_ID, {"b_operation_id": operation_id}).first()
    return None if row is None else proposal_row_txn(conn, row._mapping)


def proposal_row_txn(conn: sa.Connection, m: sa.RowMapping, prefix: str = "") -> Proposal:
    """Return the proposal in a row of the proposals table (columns under prefix); a row written
    without its authors gets them from its chain of parents."""
    legacy = None
    if m[prefix + "authors_json"] is None:
        legacy = chain_authors_txn(conn, OperationId(m[prefix + "operation_id"]))
    return proposal_from(m, prefix, legacy)


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


def proposal_txn(conn: sa.Connection, operation_id: OperationId) -> Proposal:
    """Return the proposal with that operation id, or raise NotFound."""
    proposal = find_proposal_txn(conn, operation_id)
    if proposal is None:
        raise NotFound("operation", operation_id)
    return proposal


def review_txn(conn: sa.Connection, operation_id: OperationId) -> PendingReview:
    """Return the pending review of an operation, or raise NotFound."""
    row = conn.execute(q.REVIEW_BY_ID, {"b_operation_id": operation_id}).first()
    if row is None:
        raise NotFound("pending review", operation_id)
    return review_from(row._mapping)
