"""Proposals, their pending reviews and the case's current proposal: ``ProposalMethods`` starts and
edits proposals and reads them back, each public method one transaction, over helpers that join the
caller's (ending in ``_txn``).

A proposal is inserted once per operation id (the primary key); the case's current pointer
moves only by compare-and-set, and a new proposal takes a case only when the case has none, its
current proposal is decided, or the caller names the current proposal it replaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from decisionflow.review_rules import ReviewRule, encode_rule, rule_digest
from decisionflow.vocabulary import CaseId, OperationId
from orchestrator.audit_log.events import EDITED, REPLACED, STARTED, proposal_entry
from orchestrator.domain import (
    PendingReview,
    Proposal,
    ProposalView,
    SealedCheckpoint,
    authors_to_json,
    carry_authors,
    evidence_to_json,
    policy_to_json,
)
from orchestrator.errors import CaseHasOpenProposal, NotFound, StaleProposal
from orchestrator.schema import operations, pending_reviews, review_rules
from orchestrator.store import _audit_entries, _inbox, _operations
from orchestrator.store import _statements as q
from orchestrator.store._rows import operation_id_of, proposal_row_txn, review_from
from orchestrator.store._store_base import StoreBase


def insert_proposal_row_txn(conn: sa.Connection, proposal: Proposal) -> Proposal:
    """Insert the proposal's own row with its authors carried from its parent (read in this
    transaction) and return it as stored; an IntegrityError here may mean the operation id exists."""
    parent = None if proposal.parent_operation_id is None else find_proposal_txn(conn, proposal.parent_operation_id)
    proposal = carry_authors(proposal, parent)
    content = proposal.content
    digest = None if proposal.rule is None else store_rule_txn(conn, proposal.rule)
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
            "rule_digest": digest,
        },
    )
    return proposal


def store_rule_txn(conn: sa.Connection, rule: ReviewRule) -> str:
    """Store the rule under its digest unless it is stored already (the same bytes: content-addressed);
    return the digest."""
    digest = rule_digest(rule)
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    conn.execute(
        insert(review_rules)
        .values(digest=digest, encoded=encode_rule(rule))
        .on_conflict_do_nothing(index_elements=[review_rules.c.digest])
    )
    return digest


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


class ProposalMethods(StoreBase):
    """Proposals, their pending reviews and the case's current proposal."""

    def create_proposal(
        self,
        proposal: Proposal,
        review: PendingReview,
        saved: Sequence[SealedCheckpoint],
        expected_operation_id: OperationId | None = None,
        *,
        open_review_limit: int = 0,
    ) -> tuple[Proposal, bool]:
        """Record a new proposal, its pending review and checkpoints, and make it the case's current one.

        The proposal replaces its parent_operation_id, if it names one (the caller names the same
        proposal as expected_operation_id), and carries that proposal's authors forward.
        Returns the stored proposal and whether this call created it; the same content
        started twice returns the first proposal unchanged. Other content takes the case when it
        has no proposal or a decided one, or by compare-and-set from expected_operation_id; an
        undecided current proposal not named is kept (CaseHasOpenProposal), a named one that is no
        longer current is refused (StaleProposal), and so is a new proposal of an author who already
        has open_review_limit in the inbox on other cases (TooManyOpenReviews; 0: no cap); a refusal
        writes nothing. Any other constraint failure is raised.
        """

        def work(conn: sa.Connection) -> tuple[Proposal, bool]:
            try:
                with self.transactions.savepoint_txn(conn):
                    stored = insert_proposal_row_txn(conn, proposal)
            except IntegrityError:
                # Read committed: after losing the race on the primary key, this sees the winner.
                existing = find_proposal_txn(conn, proposal.operation_id)
                if existing is None:
                    raise  # some other constraint failed; not a duplicate operation id
                return existing, False
            _inbox.check_open_reviews_txn(conn, stored.created_by, stored.case_id, open_review_limit, writing=True)
            insert_operation_and_review_txn(conn, stored, review)
            self.checkpoints.insert_txn(conn, saved)
            self._take_case_txn(conn, stored, expected_operation_id)
            event = STARTED if expected_operation_id is None else REPLACED
            entry = proposal_entry(stored, event, stored.created_by, stored.created_at, expected_operation_id)
            _audit_entries.append_txn(conn, entry)
            return stored, True

        stored, created = self.transactions.batched(work)
        if created:
            self._wrote(saved)
        return stored, created

    def _take_case_txn(
        self, conn: sa.Connection, proposal: Proposal, expected_operation_id: OperationId | None
    ) -> None:
        # Concurrent proposals for one case race on the case row: the insert (primary key) or the
        # compare-and-set of its pointer lets one win; a loser reads the winner (committed by then)
        # and is refused as the rules say. Two rounds settle any race; a third only if the winner
        # was decided in between.
        case_id, operation_id, now = proposal.case_id, proposal.operation_id, proposal.created_at
        for _ in range(3):
            current = start_allowed_txn(conn, case_id, expected_operation_id)
            if current is None:
                try:
                    with self.transactions.savepoint_txn(conn):
                        insert_case_txn(conn, case_id, operation_id, now)
                    return
                except IntegrityError:
                    continue
            if move_current_txn(conn, case_id, current, operation_id, now):
                return
        raise CaseHasOpenProposal(case_id, current_txn(conn, case_id) or "")

    def start_inputs(
        self,
        operation_id: OperationId,
        case_id: CaseId,
        expected_operation_id: OperationId | None,
        *,
        author: str = "",
        open_review_limit: int = 0,
    ) -> tuple[Proposal, PendingReview] | None:
        """What a StartReview needs to know before its workflow runs, read in one snapshot: the
        proposal with operation_id and its pending review when it exists (the start is a replay);
        else None, after raising the refusal new content for case_id by author would meet now
        (nothing is written)."""
        with self.transactions.read() as conn:
            existing = find_proposal_txn(conn, operation_id)
            if existing is not None:
                return existing, review_txn(conn, operation_id)
            start_allowed_txn(conn, case_id, expected_operation_id)
            _inbox.check_open_reviews_txn(conn, author, case_id, open_review_limit, writing=False)
            return None

    def create_edit(
        self,
        proposal: Proposal,
        expected_operation_id: OperationId,
        review: PendingReview,
        saved: Sequence[SealedCheckpoint],
        *,
        open_review_limit: int = 0,
    ) -> Proposal:
        """Record an edited proposal and move the case's current pointer from expected to it (or refuse as stale).

        A new proposal carries the authors of the one it was edited from. When the edited content
        already exists as a proposal, that proposal becomes current again, its authors as first
        recorded; if it is undecided, its pending review moves to the checkpoint of this edit's run.
        An edit that puts a pending review in the inbox is refused (TooManyOpenReviews) when its
        editor already has open_review_limit there on other cases (0: no cap).
        """
        with self.transactions.write() as conn:
            created = True
            try:
                with self.transactions.savepoint_txn(conn):
                    insert_proposal_row_txn(conn, proposal)
            except IntegrityError:
                if find_proposal_txn(conn, proposal.operation_id) is None:
                    raise  # some other constraint failed; not a duplicate operation id
                created = False
            if created:
                insert_operation_and_review_txn(conn, proposal, review)
            # An earlier, undecided proposal made current again resumes from this run's checkpoint,
            # never from one pruning may have removed while it was superseded.
            written = created or renew_review_txn(conn, review)
            if written:
                _inbox.check_open_reviews_txn(
                    conn, proposal.created_by, proposal.case_id, open_review_limit, writing=True
                )
                self.checkpoints.insert_txn(conn, saved)
            if not move_current_txn(
                conn, proposal.case_id, expected_operation_id, proposal.operation_id, proposal.created_at
            ):
                current = current_txn(conn, proposal.case_id)
                raise StaleProposal(expected_operation_id, current or "")
            stored = proposal_txn(conn, proposal.operation_id)
            # Edited back to a proposal that exists, the case means that proposal again: its leaf names
            # the editor and the time of this edit, which its own row (created earlier) does not hold.
            entry = proposal_entry(stored, EDITED, proposal.created_by, proposal.created_at, expected_operation_id)
            _audit_entries.append_txn(conn, entry)
        if written:
            self._wrote(saved)
        return stored

    def current_operation_id(self, case_id: CaseId) -> OperationId | None:
        """Return the operation id of the case's current proposal, if the case exists."""
        with self.transactions.read() as conn:
            return current_txn(conn, case_id)

    def get_proposal(self, operation_id: OperationId) -> Proposal:
        """Return the proposal with that operation id, or raise NotFound."""
        with self.transactions.read() as conn:
            return proposal_txn(conn, operation_id)

    def find_proposal(self, operation_id: OperationId) -> Proposal | None:
        """Return the proposal with that operation id, or None when there is none."""
        with self.transactions.read() as conn:
            return find_proposal_txn(conn, operation_id)

    def get_pending_review(self, operation_id: OperationId) -> PendingReview:
        """Return the pending review of an operation, or raise NotFound."""
        with self.transactions.read() as conn:
            return review_txn(conn, operation_id)

    def proposal_view(self, operation_id: OperationId) -> ProposalView:
        """Return the proposal, its operation and whether it is the case's current proposal; raise NotFound."""
        with self.transactions.read() as conn:
            proposal = proposal_txn(conn, operation_id)
            operation = _operations.operation_txn(conn, operation_id)
            current = current_txn(conn, proposal.case_id)
        return ProposalView(proposal, operation, current == operation_id)
