"""Reviews under a rule in the inbox: where each stands, and whether the caller may decide it now.

A review under the default rule is listed to every reader as before rules existed, and costs no
statement more: its progress is not computed (none is reported). Rows under another rule get their
votes and their escalations in one statement each per page (``votes_by_operation_txn``,
``escalations_by_operation_txn``) and their progress from the rule the
proposal captured (decoded once per digest). A reader who is a reviewer sees a review under a rule
only while ``ReviewProgress.may_vote`` holds for them: eligible at the current stage, not voted, not
an author, the review open and not past its deadline.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import sqlalchemy as sa

from decisionflow.review_rules import Escalation, Vote, review_progress
from decisionflow.vocabulary import OperationId
from orchestrator.domain import Listing, PendingReviewEntry, PendingReviewFilter
from orchestrator.schema import escalations, proposals, votes
from orchestrator.store._columns import decision_of
from orchestrator.store._inbox import PENDING, count_pending_reviews_txn, matching, pending_reviews_txn
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


def inbox_order(entries: Sequence[PendingReviewEntry]) -> list[PendingReviewEntry]:
    """Return entries escalated first, then by due time (none last), then in the listing's order."""

    def key(indexed: tuple[int, PendingReviewEntry]) -> tuple[bool, bool, datetime, int]:
        position, entry = indexed
        progress = entry.progress
        escalated = progress is not None and progress.escalated
        due = None if progress is None else progress.due_at
        return (not escalated, due is None, due or entry.pending_since, position)

    return [entry for _, entry in sorted(enumerate(entries), key=key)]


def seen_page_txn(
    conn: sa.Connection,
    filters: PendingReviewFilter,
    limit: int,
    after: tuple[datetime, OperationId] | None,
    reader: Reader,
    now: datetime,
) -> list[PendingReviewEntry]:
    """Return up to limit entries reader sees, in the listing's order after a page key. A reviewer's page
    reads on past the reviews under a rule they may not decide until it is full or the inbox ends, so a
    page is short only at the end (and its last entry is the next page's key, as for everyone)."""
    seen: list[PendingReviewEntry] = []
    while True:
        batch = with_progress_txn(conn, pending_reviews_txn(conn, filters, limit, after), now)
        seen.extend(entry for entry in batch if may_decide(entry, reader))
        if len(seen) >= limit or len(batch) < limit:
            return seen[:limit]
        last = batch[-1]
        after = (last.pending_since, last.proposal.operation_id)


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
        after: tuple[datetime, OperationId] | None,
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
