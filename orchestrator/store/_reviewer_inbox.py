"""Reviews under a rule in the inbox: where each stands, and whether the caller may decide it now.

A review under the default rule is listed to every reader as before rules existed, and costs no
statement more: its progress is not computed (none is reported). Rows under another rule get their
votes and their escalations in one statement each per page (``votes_by_operation_txn``,
``escalations_by_operation_txn``) and their progress from the rule the
proposal captured (decoded once per digest). A reader who is a reviewer sees a review under a rule
only while ``ReviewProgress.may_vote`` holds for them: eligible at the current stage, not voted, not
an author, the review open and not past its deadline.

The inbox's order (``inbox_key``: escalated first, then by due time, then oldest first) depends on
each review's progress now, which no column holds; so every page reads every pending review under a
rule that matches the filters, places and judges each, and merges them with the next page of reviews
under the default rule (all of rank 2, read by their keyset): the order holds across pages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from decisionflow.review_rules import Escalation, Vote, review_progress
from decisionflow.vocabulary import OperationId
from orchestrator.domain import Listing, PendingReviewEntry, PendingReviewFilter
from orchestrator.schema import escalations, operations, proposals, votes
from orchestrator.store._columns import decision_of
from orchestrator.store._inbox import PENDING, count_pending_reviews_txn, matching, versions_txn
from orchestrator.store._rows import proposal_row_txn, review_from
from orchestrator.store._store_base import StoreBase
from orchestrator.store._votes import groups_of, review_record

_VOTES_OF = (
    sa.select(votes)
    .where(votes.c.operation_id.in_(sa.bindparam("b_operation_ids", expanding=True)))
    .order_by(votes.c.vote_id)
)


_ESCALATIONS_OF = (
    sa.select(escalations)
    .where(escalations.c.operation_id.in_(sa.bindparam("b_operation_ids", expanding=True)))
    .order_by(escalations.c.operation_id, escalations.c.stage_index)
)


@dataclass(frozen=True, slots=True)
class Reader:
    """Who reads the inbox: a reviewer sees the reviews under a rule they may decide now; everyone
    else (sees_all: operators, auditors, authors without the reviewer role) sees every review."""

    principal: str
    groups: frozenset[str]
    sees_all: bool


# The reader who sees every review: operators, auditors, and the store's own callers.
EVERY_REVIEW = Reader("", frozenset(), sees_all=True)


def votes_by_operation_txn(conn: sa.Connection, operation_ids: Sequence[OperationId]) -> dict[str, tuple[Vote, ...]]:
    """Return the votes of each operation, in the order they were recorded (one statement; none for no ids)."""
    if not operation_ids:
        return {}
    found: dict[str, list[Vote]] = {}
    for r in conn.execute(_VOTES_OF, {"b_operation_ids": list(operation_ids)}):
        found.setdefault(r.operation_id, []).append(
            Vote(r.principal, decision_of(r.decision), groups_of(r.groups), r.voted_at)
        )
    return {operation_id: tuple(cast) for operation_id, cast in found.items()}


def escalations_by_operation_txn(
    conn: sa.Connection, operation_ids: Sequence[OperationId]
) -> dict[str, tuple[Escalation, ...]]:
    """Return the escalated stages of each operation, in stage order (one statement; none for no ids)."""
    if not operation_ids:
        return {}
    found: dict[str, list[Escalation]] = {}
    for r in conn.execute(_ESCALATIONS_OF, {"b_operation_ids": list(operation_ids)}):
        found.setdefault(r.operation_id, []).append(Escalation(r.stage_index, r.escalated_at))
    return {operation_id: tuple(stages) for operation_id, stages in found.items()}


def with_progress_txn(
    conn: sa.Connection, entries: Iterable[PendingReviewEntry], now: datetime
) -> list[PendingReviewEntry]:
    """Return entries, each under a rule other than the default one carrying where its review stands at now."""
    entries = list(entries)
    ruled = [e.proposal.operation_id for e in entries if e.proposal.rule is not None]
    cast = votes_by_operation_txn(conn, ruled)
    escalated = escalations_by_operation_txn(conn, ruled)

    def progress(entry: PendingReviewEntry) -> PendingReviewEntry:
        operation_id = entry.proposal.operation_id
        record = review_record(entry.proposal, cast.get(operation_id, ()), escalated.get(operation_id, ()))
        return replace(entry, progress=review_progress(record, now))

    return [entry if entry.proposal.rule is None else progress(entry) for entry in entries]


def may_decide(entry: PendingReviewEntry, reader: Reader) -> bool:
    """True when reader sees entry: they see all, it follows the default rule, or its rule lets them vote now."""
    if reader.sees_all or entry.progress is None:
        return True
    return entry.progress.may_vote(reader.principal, reader.groups)


@dataclass(frozen=True, slots=True, order=True)
class InboxKey:
    """An entry's place in the inbox's order: escalated reviews first (rank 0), then those with a due time
    (rank 1), each by due time; then the rest (rank 2: the default rule, no due time) oldest first; ties by
    the time it became pending, then the operation id. A page token carries the last entry's key."""

    rank: int
    moment: datetime
    """The due time for ranks 0 and 1, the time it became pending for rank 2."""
    pending_since: datetime
    operation_id: str


def inbox_key(entry: PendingReviewEntry) -> InboxKey:
    """Return entry's place in the inbox's order, from its progress (at the listing's now)."""
    progress, since = entry.progress, entry.pending_since
    due = None if progress is None else progress.due_at
    if due is None:
        return InboxKey(2, since, since, entry.proposal.operation_id)
    return InboxKey(0 if progress is not None and progress.escalated else 1, due, since, entry.proposal.operation_id)


def inbox_order(entries: Iterable[PendingReviewEntry]) -> list[PendingReviewEntry]:
    """Return entries escalated first, then by due time (none last), then oldest first."""
    return sorted(entries, key=inbox_key)


def _candidates(filters: PendingReviewFilter, limit: int, after: InboxKey | None) -> sa.CompoundSelect[Any]:
    """Every pending review under a rule that filters match, and up to limit under the default rule after
    the page key in the listing's order, in one statement: a review under the default rule is rank 2, so
    the keyset (pending_since, operation id) finds its next ones, all of them when the key is of rank 0 or 1."""
    ruled = PENDING.where(*matching(filters), proposals.c.rule_digest.is_not(None))
    default = PENDING.where(*matching(filters), proposals.c.rule_digest.is_(None))
    if after is not None and after.rank == 2:
        at, operation_id = after.pending_since, after.operation_id
        default = default.where(
            operations.c.state_changed_at >= at,
            sa.or_(
                operations.c.state_changed_at > at,
                sa.and_(operations.c.state_changed_at == at, operations.c.operation_id > operation_id),
            ),
        )
    default = default.order_by(operations.c.state_changed_at, operations.c.operation_id).limit(limit)
    # Each part as a subquery: SQLite refuses ORDER BY and LIMIT on a bare member of a UNION.
    parts = [sa.select(part.subquery()) for part in (ruled, default)]
    return sa.union_all(*parts)


def seen_page_txn(
    conn: sa.Connection,
    filters: PendingReviewFilter,
    limit: int,
    after: InboxKey | None,
    reader: Reader,
    now: datetime,
) -> list[PendingReviewEntry]:
    """Return up to limit entries reader sees, in the inbox's order (inbox_key at now) after a page key. The
    reviews under a rule that match filters are read and judged on every page (as count_seen_txn does), so
    the order holds across pages; those under the default rule are read a page at a time. A page is short
    only at the end. An entry whose place moves while a caller pages (its stage escalated or completed)
    may be listed on a later page again, or not; every other entry is listed once."""
    found = [
        PendingReviewEntry(
            proposal_row_txn(conn, row._mapping, "p_"), review_from(row._mapping, "r_"), 0, row.pending_since
        )
        for row in conn.execute(_candidates(filters, limit, after))
    ]
    seen = [
        entry
        for entry in with_progress_txn(conn, found, now)
        if may_decide(entry, reader) and (after is None or inbox_key(entry) > after)
    ]
    page = inbox_order(seen)[:limit]
    versions = versions_txn(conn, [entry.proposal.operation_id for entry in page])
    return [replace(entry, versions=versions[entry.proposal.operation_id]) for entry in page]


def count_seen_txn(conn: sa.Connection, filters: PendingReviewFilter, reader: Reader, now: datetime) -> int:
    """Return how many entries seen_page_txn lists for reader over every page: counted in SQL for a reader
    who sees all and for reviews under the default rule; a reviewer's reviews under a rule are read and
    judged as the listing judges them (the cost grows with the reviews under a rule, not the inbox)."""
    if reader.sees_all:
        return count_pending_reviews_txn(conn, filters)
    default = PENDING.where(*matching(filters), proposals.c.rule_digest.is_(None))
    total = int(conn.execute(default.with_only_columns(sa.func.count())).scalar_one())
    ruled = PENDING.where(*matching(filters), proposals.c.rule_digest.is_not(None))
    found = [
        PendingReviewEntry(
            proposal_row_txn(conn, row._mapping, "p_"), review_from(row._mapping, "r_"), 0, row.pending_since
        )
        for row in conn.execute(ruled)
    ]
    return total + sum(may_decide(entry, reader) for entry in with_progress_txn(conn, found, now))


class ReviewerInboxMethods(StoreBase):
    """The inbox's listing as each reader sees it."""

    def pending_reviews_listing(
        self,
        filters: PendingReviewFilter,
        limit: int,
        after: InboxKey | None,
        *,
        counted: bool,
        reader: Reader = EVERY_REVIEW,
        now: datetime | None = None,
    ) -> Listing[PendingReviewEntry]:
        """Return list_pending_reviews' page of the entries reader sees (each under a rule with its progress
        at now) and, when counted, how many entries reader sees over every page, both read from one snapshot."""
        at = now or datetime.now(UTC)
        with self.transactions.read(one_snapshot=counted) as conn:
            rows = seen_page_txn(conn, filters, limit, after, reader, at)
            total = count_seen_txn(conn, filters, reader, at) if counted else None
        return Listing(tuple(rows), total)
