"""The reviewer's inbox: every case's current proposal that is still undecided. ``InboxMethods`` lists
it and checks an author's share of it, each public method one transaction, over helpers that join the
caller's (ending in ``_txn``; the proposals' writes check the share in their own transaction).

A pending review is listed when its operation is stored as PENDING_REVIEW and its case's current
pointer names it; a proposal an edit or a replacement left behind (SUPERSEDED) is not. The order is
the time the operation entered PENDING_REVIEW, which for an undecided operation is the time its
proposal was recorded and never changes, then the operation id: a keyset that pages through
``ix_operations_state_changed`` (state, state_changed_at) without an index of its own.

An author's share of the inbox is capped (orchestrator.quotas): ``check_open_reviews_txn`` counts the
author's entries on other cases, in the transaction that would add one. On PostgreSQL, where
writers run in parallel, it first takes a transaction-scoped advisory lock named by the author, so
two calls of one author cannot both count below the cap and both add; SQLite runs one writer at a
time anyway.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from decisionflow.vocabulary import CaseId, OperationId, OperationState
from orchestrator.domain import PendingReviewEntry, PendingReviewFilter
from orchestrator.errors import TooManyOpenReviews
from orchestrator.schema import cases, operations, pending_reviews, proposals
from orchestrator.store._columns import state_text
from orchestrator.store._rows import proposal_row_txn, review_from
from orchestrator.store._store_base import StoreBase

PENDING = (
    sa.select(
        operations.c.state_changed_at.label("pending_since"),
        *(c.label(f"p_{c.name}") for c in proposals.c),
        *(c.label(f"r_{c.name}") for c in pending_reviews.c),
    )
    .select_from(operations)
    .join(
        cases,
        sa.and_(cases.c.case_id == operations.c.case_id, cases.c.current_operation_id == operations.c.operation_id),
    )
    .join(proposals, proposals.c.operation_id == operations.c.operation_id)
    .join(pending_reviews, pending_reviews.c.operation_id == operations.c.operation_id)
    .where(operations.c.state == state_text(OperationState.PENDING_REVIEW))
)


_OPEN_OF_AUTHOR = (
    sa.select(sa.literal(1))
    .select_from(operations)
    .join(
        cases,
        sa.and_(cases.c.case_id == operations.c.case_id, cases.c.current_operation_id == operations.c.operation_id),
    )
    .join(proposals, proposals.c.operation_id == operations.c.operation_id)
    .where(
        operations.c.state == state_text(OperationState.PENDING_REVIEW),
        proposals.c.created_by == sa.bindparam("b_author"),
        operations.c.case_id != sa.bindparam("b_case_id"),
    )
    .limit(sa.bindparam("b_limit"))
    .subquery()
)
# Counting stops at the cap: an author far above it (after the cap was lowered) costs no more.
OPEN_REVIEWS_OF_AUTHOR = sa.select(sa.func.count()).select_from(_OPEN_OF_AUTHOR)
# Keeps the advisory locks of this check apart from any other use of pg_advisory_xact_lock.
_LOCK_DOMAIN = b"decisionflow.orchestrator.open_reviews\x00"


def _author_lock_key(author: str) -> int:
    digest = hashlib.sha256(_LOCK_DOMAIN + author.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def open_reviews_txn(conn: sa.Connection, author: str, case_id: CaseId, limit: int) -> int:
    """Return how many of author's proposals the inbox lists on cases other than case_id, counting at most limit."""
    params = {"b_author": author, "b_case_id": case_id, "b_limit": limit}
    return int(conn.execute(OPEN_REVIEWS_OF_AUTHOR, params).scalar_one())


def check_open_reviews_txn(conn: sa.Connection, author: str, case_id: CaseId, limit: int, *, writing: bool) -> None:
    """Raise TooManyOpenReviews when author already has limit proposals in the inbox on cases other than
    case_id (0: no cap). writing: the caller's transaction is about to add one, so on PostgreSQL the
    author's calls take turns from here to its commit."""
    if limit <= 0:
        return
    if writing and conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_author_lock_key(author))))
    if open_reviews_txn(conn, author, case_id, limit) >= limit:
        raise TooManyOpenReviews(author, limit)


def matching(filters: PendingReviewFilter) -> list[sa.ColumnElement[bool]]:
    conditions: list[sa.ColumnElement[bool]] = []
    if filters.case_id is not None:
        conditions.append(cases.c.case_id == filters.case_id)
    if filters.case_id_prefix is not None:
        # Not LIKE: '_' is a case id character and a LIKE wildcard, and SQLite's LIKE folds case.
        prefix = filters.case_id_prefix
        conditions.append(sa.func.substr(cases.c.case_id, 1, len(prefix)) == prefix)
    if filters.created_by is not None:
        conditions.append(proposals.c.created_by == filters.created_by)
    if filters.action is not None:
        conditions.append(proposals.c.action == filters.action)
    return conditions


def count_pending_reviews_txn(conn: sa.Connection, filters: PendingReviewFilter) -> int:
    """Return how many entries pending_reviews_txn lists with filters, over every page: the same joins
    and conditions, counted."""
    counted = PENDING.where(*matching(filters)).with_only_columns(sa.func.count())
    return int(conn.execute(counted).scalar_one())


def pending_reviews_txn(
    conn: sa.Connection, filters: PendingReviewFilter, limit: int, after: tuple[datetime, OperationId] | None
) -> list[PendingReviewEntry]:
    """Return up to limit undecided current proposals matching filters, oldest first, after a page key."""
    query = PENDING.where(*matching(filters))
    if after is not None:
        at, operation_id = after
        # The ">=" alone lets the database start the index range at the page key instead of reading
        # every older pending operation again; the OR then drops the ones on the key's own instant.
        query = query.where(
            operations.c.state_changed_at >= at,
            sa.or_(
                operations.c.state_changed_at > at,
                sa.and_(operations.c.state_changed_at == at, operations.c.operation_id > operation_id),
            ),
        )
    query = query.order_by(operations.c.state_changed_at, operations.c.operation_id).limit(limit)
    found = [(row._mapping, proposal_row_txn(conn, row._mapping, "p_")) for row in conn.execute(query)]
    versions = versions_txn(conn, [proposal.operation_id for _, proposal in found])
    return [
        PendingReviewEntry(proposal, review_from(m, "r_"), versions[proposal.operation_id], m["pending_since"])
        for m, proposal in found
    ]


def versions_txn(conn: sa.Connection, operation_ids: Sequence[OperationId]) -> dict[OperationId, int]:
    """Return, per proposal, how many proposals its chain of parents holds, itself included (one statement)."""
    if not operation_ids:
        return {}
    chain = (
        sa.select(
            proposals.c.operation_id.label("head"),
            proposals.c.operation_id.label("visited"),
            proposals.c.parent_operation_id.label("parent"),
        )
        .where(proposals.c.operation_id.in_(operation_ids))
        .cte("version_chain", recursive=True)
    )
    parent = proposals.alias("parent")
    # UNION, not UNION ALL: a row seen again is dropped, so even a corrupted cycle of parents ends.
    chain = chain.union(
        sa.select(chain.c.head, parent.c.operation_id, parent.c.parent_operation_id).where(
            parent.c.operation_id == chain.c.parent
        )
    )
    counted = sa.select(chain.c.head, sa.func.count(sa.distinct(chain.c.visited))).group_by(chain.c.head)
    return {OperationId(head): int(n) for head, n in conn.execute(counted)}


class InboxMethods(StoreBase):
    """The inbox: the pending reviews and each author's share of it."""

    def list_pending_reviews(
        self, filters: PendingReviewFilter, limit: int, after: tuple[datetime, OperationId] | None
    ) -> list[PendingReviewEntry]:
        """Return up to limit undecided current proposals matching filters, oldest first, after a page
        key, each with its pending review and version count, from one snapshot."""
        with self.transactions.read() as conn:
            return pending_reviews_txn(conn, filters, limit, after)

    def check_open_reviews(self, author: str, case_id: CaseId, open_review_limit: int) -> None:
        """Raise TooManyOpenReviews when author already has open_review_limit proposals in the inbox on
        cases other than case_id (0: no cap); the write that would add one checks again."""
        with self.transactions.read() as conn:
            check_open_reviews_txn(conn, author, case_id, open_review_limit, writing=False)
