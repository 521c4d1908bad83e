"""OrchestratorStore's proposals and pending reviews: starting and editing proposals (the case's
current pointer taken by insert or compare-and-set), and reading them back."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from decisionflow.vocabulary import CaseId, OperationId
from orchestrator.audit_log.events import EDITED, REPLACED, STARTED, proposal_entry
from orchestrator.domain import (
    PendingReview,
    PendingReviewEntry,
    PendingReviewFilter,
    Proposal,
    ProposalView,
    SealedCheckpoint,
)
from orchestrator.errors import CaseHasOpenProposal, StaleProposal
from orchestrator.store import _audit_entries, _inbox, _operations, _proposals
from orchestrator.store._store_base import StoreBase


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
                    stored = _proposals.insert_proposal_row_txn(conn, proposal)
            except IntegrityError:
                # Read committed: after losing the race on the primary key, this sees the winner.
                existing = _proposals.find_proposal_txn(conn, proposal.operation_id)
                if existing is None:
                    raise  # some other constraint failed; not a duplicate operation id
                return existing, False
            _inbox.check_open_reviews_txn(conn, stored.created_by, stored.case_id, open_review_limit, writing=True)
            _proposals.insert_operation_and_review_txn(conn, stored, review)
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
            current = _proposals.start_allowed_txn(conn, case_id, expected_operation_id)
            if current is None:
                try:
                    with self.transactions.savepoint_txn(conn):
                        _proposals.insert_case_txn(conn, case_id, operation_id, now)
                    return
                except IntegrityError:
                    continue
            if _proposals.move_current_txn(conn, case_id, current, operation_id, now):
                return
        raise CaseHasOpenProposal(case_id, _proposals.current_txn(conn, case_id) or "")

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
            existing = _proposals.find_proposal_txn(conn, operation_id)
            if existing is not None:
                return existing, _proposals.review_txn(conn, operation_id)
            _proposals.start_allowed_txn(conn, case_id, expected_operation_id)
            _inbox.check_open_reviews_txn(conn, author, case_id, open_review_limit, writing=False)
            return None

    def check_open_reviews(self, author: str, case_id: CaseId, open_review_limit: int) -> None:
        """Raise TooManyOpenReviews when author already has open_review_limit proposals in the inbox on
        cases other than case_id (0: no cap); the write that would add one checks again."""
        with self.transactions.read() as conn:
            _inbox.check_open_reviews_txn(conn, author, case_id, open_review_limit, writing=False)

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
                    _proposals.insert_proposal_row_txn(conn, proposal)
            except IntegrityError:
                if _proposals.find_proposal_txn(conn, proposal.operation_id) is None:
                    raise  # some other constraint failed; not a duplicate operation id
                created = False
            if created:
                _proposals.insert_operation_and_review_txn(conn, proposal, review)
            # An earlier, undecided proposal made current again resumes from this run's checkpoint,
            # never from one pruning may have removed while it was superseded.
            written = created or _proposals.renew_review_txn(conn, review)
            if written:
                _inbox.check_open_reviews_txn(
                    conn, proposal.created_by, proposal.case_id, open_review_limit, writing=True
                )
                self.checkpoints.insert_txn(conn, saved)
            if not _proposals.move_current_txn(
                conn, proposal.case_id, expected_operation_id, proposal.operation_id, proposal.created_at
            ):
                current = _proposals.current_txn(conn, proposal.case_id)
                raise StaleProposal(expected_operation_id, current or "")
            stored = _proposals.proposal_txn(conn, proposal.operation_id)
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
            return _proposals.current_txn(conn, case_id)

    def get_proposal(self, operation_id: OperationId) -> Proposal:
        """Return the proposal with that operation id, or raise NotFound."""
        with self.transactions.read() as conn:
            return _proposals.proposal_txn(conn, operation_id)

    def find_proposal(self, operation_id: OperationId) -> Proposal | None:
        """Return the proposal with that operation id, or None when there is none."""
        with self.transactions.read() as conn:
            return _proposals.find_proposal_txn(conn, operation_id)

    def get_pending_review(self, operation_id: OperationId) -> PendingReview:
        """Return the pending review of an operation, or raise NotFound."""
        with self.transactions.read() as conn:
            return _proposals.review_txn(conn, operation_id)

    def list_pending_reviews(
        self, filters: PendingReviewFilter, limit: int, after: tuple[datetime, OperationId] | None
    ) -> list[PendingReviewEntry]:
        """Return up to limit undecided current proposals matching filters, oldest first, after a page
        key, each with its pending review and version count, from one snapshot."""
        with self.transactions.read() as conn:
            return _inbox.pending_reviews_txn(conn, filters, limit, after)

    def proposal_view(self, operation_id: OperationId) -> ProposalView:
        """Return the proposal, its operation and whether it is the case's current proposal; raise NotFound."""
        with self.transactions.read() as conn:
            proposal = _proposals.proposal_txn(conn, operation_id)
            operation = _operations.operation_txn(conn, operation_id)
            current = _proposals.current_txn(conn, proposal.case_id)
        return ProposalView(proposal, operation, current == operation_id)
