"""OrchestratorStore: each public method is one transaction, its read-back inside it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from decisionflow.vocabulary import OPEN_STATES, Decision, OperationState, Receipt
from decisionflow_server.storage.transactions import Transactions
from orchestrator.domain import (
    DecisionInputs,
    FirstAttempt,
    Operation,
    OperationTally,
    PendingReview,
    PendingReviewEntry,
    PendingReviewFilter,
    Proposal,
    ProposalView,
    RecordedDecision,
    SealedCheckpoint,
    Settlement,
)
from orchestrator.errors import CaseHasOpenProposal, NotFound, NotRedrivable, ReviewExpired, StaleProposal
from orchestrator.schema import operations
from orchestrator.store import _inbox, _ledger, _operations, _proposals
from orchestrator.store import _statements as q
from orchestrator.store._checkpoints import CheckpointTable
from orchestrator.store._columns import state_text
from orchestrator.store._housekeeping import Housekeeping
from orchestrator.store._ledger import AttemptInFlight, DecisionAlreadyRecorded
from orchestrator.store._rows import operation_from, review_from, sealed_checkpoint_from
from orchestrator.store._takeover import RECORD_ATTEMPT_OVER_ENDED

MAX_REJECTION_REASON_CHARS = 2000


class OrchestratorStore:
    """Proposals, pending reviews, the decision ledger, operation states and checkpoints."""

    def __init__(self, engine: Engine, *, on_checkpoints_written: Callable[[int], None] | None = None) -> None:
        self.transactions = Transactions(engine, database="orchestrator")
        # Told the state bytes of the checkpoints each committed transaction wrote (metrics).
        self._checkpoints_written = on_checkpoints_written or (lambda _: None)
        self.checkpoints = CheckpointTable(self.transactions)
        self.housekeeping = Housekeeping(self.transactions, self.checkpoints)

    @property
    def engine(self) -> Engine:
        """The engine this store runs its transactions on."""
        return self.transactions.engine

    # Proposals and pending reviews.

    def create_proposal(
        self,
        proposal: Proposal,
        review: PendingReview,
        saved: Sequence[SealedCheckpoint],
        expected_operation_id: str | None = None,
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
            return stored, True

        stored, created = self.transactions.batched(work)
        if created:
            self._wrote(saved)
        return stored, created

    def _take_case_txn(self, conn: sa.Connection, proposal: Proposal, expected_operation_id: str | None) -> None:
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
        operation_id: str,
        case_id: str,
        expected_operation_id: str | None,
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

    def check_open_reviews(self, author: str, case_id: str, open_review_limit: int) -> None:
        """Raise TooManyOpenReviews when author already has open_review_limit proposals in the inbox on
        cases other than case_id (0: no cap); the write that would add one checks again."""
        with self.transactions.read() as conn:
            _inbox.check_open_reviews_txn(conn, author, case_id, open_review_limit, writing=False)

    def create_edit(
        self,
        proposal: Proposal,
        expected_operation_id: str,
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
        if written:
            self._wrote(saved)
        return stored

    def current_operation_id(self, case_id: str) -> str | None:
        """Return the operation id of the case's current proposal, if the case exists."""
        with self.transactions.read() as conn:
            return _proposals.current_txn(conn, case_id)

    def get_proposal(self, operation_id: str) -> Proposal:
        """Return the proposal with that operation id, or raise NotFound."""
        with self.transactions.read() as conn:
            return _proposals.proposal_txn(conn, operation_id)

    def find_proposal(self, operation_id: str) -> Proposal | None:
        """Return the proposal with that operation id, or None when there is none."""
        with self.transactions.read() as conn:
            return _proposals.find_proposal_txn(conn, operation_id)

    def get_pending_review(self, operation_id: str) -> PendingReview:
        """Return the pending review of an operation, or raise NotFound."""
        with self.transactions.read() as conn:
            return _proposals.review_txn(conn, operation_id)

    def list_pending_reviews(
        self, filters: PendingReviewFilter, limit: int, after: tuple[datetime, str] | None
    ) -> list[PendingReviewEntry]:
        """Return up to limit undecided current proposals matching filters, oldest first, after a page
        key, each with its pending review and version count, from one snapshot."""
        with self.transactions.read() as conn:
            return _inbox.pending_reviews_txn(conn, filters, limit, after)

    def proposal_view(self, operation_id: str) -> ProposalView:
        """Return the proposal, its operation and whether it is the case's current proposal; raise NotFound."""
        with self.transactions.read() as conn:
            proposal = _proposals.proposal_txn(conn, operation_id)
            operation = _operations.operation_txn(conn, operation_id)
            current = _proposals.current_txn(conn, proposal.case_id)
        return ProposalView(proposal, operation, current == operation_id)

    def decision_inputs(self, operation_id: str) -> DecisionInputs:
        """Return the operation (with any recorded decision), its proposal, the case's current operation id
        and the pending review with its still-sealed checkpoint, read together; raise NotFound."""
        with self.transactions.read() as conn:
            row = conn.execute(q.DECISION_INPUTS, {"b_operation_id": operation_id}).first()
            if row is None:
                raise NotFound("operation", operation_id)
            m = row._mapping
            proposal = _proposals.proposal_row_txn(conn, m, "p_")
        return DecisionInputs(
            operation=operation_from(row),
            proposal=proposal,
            current_operation_id=m["current_operation_id"],
            review=None if m["r_operation_id"] is None else review_from(m, "r_"),
            checkpoint=None if m["k_checkpoint_id"] is None else sealed_checkpoint_from(m, "k_"),
        )

    # The decision ledger and the effect record.

    def record_decision(
        self,
        decided: RecordedDecision,
        case_id: str,
        saved: Sequence[SealedCheckpoint],
        attempt: FirstAttempt | None = None,
    ) -> Operation:
        """Insert the decision once, with the workflow's final checkpoints and, for an approval, its first
        attempt (UNKNOWN, under the attempt's lease: durable before Apply is sent); return the operation.

        Raise DecisionAlreadyRecorded when one exists, StaleProposal when the operation is no longer
        the case's current proposal (an existing decision wins over staleness), ReviewExpired when an
        operator expired its review first; each writes nothing.
        """
        if attempt is not None and decided.decision is not Decision.APPROVE:
            raise ValueError("only an approval has an attempt")
        state = OperationState.APPROVED if decided.decision is Decision.APPROVE else OperationState.DECLINED

        def work(conn: sa.Connection) -> Operation:
            try:
                with self.transactions.savepoint_txn(conn):
                    _ledger.insert_decision_txn(conn, decided)
            except IntegrityError as exc:
                recorded = _ledger.decision_txn(conn, decided.operation_id)
                if recorded is None:
                    raise  # some other constraint failed (an unknown operation); not a second decision
                raise DecisionAlreadyRecorded(recorded) from exc
            current = conn.execute(q.CURRENT_FOR_UPDATE, {"b_case_id": case_id}).scalar_one_or_none()
            if current != decided.operation_id:
                raise StaleProposal(decided.operation_id, current or "")
            if attempt is None:
                row = conn.execute(
                    q.DECIDE,
                    {"b_operation_id": decided.operation_id, "b_state": state_text(state), "b_now": decided.decided_at},
                ).first()
            else:
                row = conn.execute(
                    q.DECIDE_WITH_ATTEMPT,
                    {
                        "b_operation_id": decided.operation_id,
                        "b_now": decided.decided_at,
                        "b_payload": attempt.payload,
                        "b_digest": attempt.payload_digest,
                        "b_lease_until": attempt.lease_until,
                        "b_lease_holder": attempt.lease_holder,
                    },
                ).first()
            if row is None:
                # Only a pending review is decided, and only expire-reviews moves an undecided one on: it
                # committed first (on PostgreSQL this update waited for it and then found the row moved on).
                raise ReviewExpired(decided.operation_id)
            self.checkpoints.insert_txn(conn, saved)
            return operation_from(row)

        operation = self.transactions.batched(work)
        self._wrote(saved)
        return operation

    def _wrote(self, saved: Sequence[SealedCheckpoint]) -> None:
        if saved:
            self._checkpoints_written(sum(len(c.state) for c in saved))

    def get_decision(self, operation_id: str) -> RecordedDecision | None:
        """Return the recorded decision of an operation, if any."""
        with self.transactions.read() as conn:
            return _ledger.decision_txn(conn, operation_id)

    def record_attempt(
        self,
        operation_id: str,
        payload: bytes,
        digest: str,
        now: datetime,
        lease_until: datetime,
        *,
        holder: str | None = None,
        ended_holder: str | None = None,
    ) -> Operation:
        """Durably note an Apply about to be sent (state UNKNOWN until the receiver answers), holding
        the operation until lease_until in holder's name; raise NotRedrivable unless the operation is
        APPROVED or UNKNOWN, AttemptInFlight while another attempt's lease holds it (a lease held in
        ended_holder's name, a holder known to have ended, is taken over).

        The payload is stored on the first attempt and reused by every later one.
        """
        statement = q.RECORD_ATTEMPT if ended_holder is None else RECORD_ATTEMPT_OVER_ENDED

        def work(conn: sa.Connection) -> Operation:
            row = conn.execute(
                statement,
                {
                    "b_operation_id": operation_id,
                    "b_now": now,
                    "b_payload": payload,
                    "b_digest": digest,
                    "b_lease_until": lease_until,
                    "b_lease_holder": holder,
                    "b_ended_holder": ended_holder,
                },
            ).first()
            if row is not None:
                return operation_from(row)
            operation = _operations.operation_txn(conn, operation_id)
            if operation.state in OPEN_STATES:
                raise AttemptInFlight(operation)
            raise NotRedrivable(operation_id, operation.state)

        return self.transactions.batched(work)

    def release_attempt(self, operation_id: str, lease_until: datetime) -> Operation:
        """Give up the lease an attempt took until lease_until (if it still holds it); return the operation."""

        def work(conn: sa.Connection) -> Operation:
            conn.execute(q.RELEASE_ATTEMPT, {"b_operation_id": operation_id, "b_lease_until": lease_until})
            return _operations.operation_txn(conn, operation_id)

        return self.transactions.batched(work)

    def record_receipt(self, operation_id: str, receipt: Receipt, now: datetime) -> Operation:
        """Move an open operation to COMMITTED with the receiver's receipt (a second receipt is ignored)."""

        def work(conn: sa.Connection) -> Operation:
            row = conn.execute(
                q.RECORD_RECEIPT,
                {
                    "b_operation_id": operation_id,
                    "b_now": now,
                    "b_receipt_id": receipt.receipt_id,
                    "b_applied_at": receipt.applied_at,
                },
            ).first()
            # No row: the operation was settled already (or is unknown); report it as it stands.
            return operation_from(row) if row is not None else _operations.operation_txn(conn, operation_id)

        return self.transactions.batched(work)

    def record_rejection(self, operation_id: str, reason: str, now: datetime) -> Operation:
        """Move an open operation to REJECTED: the receiver definitely refused the effect."""

        def work(conn: sa.Connection) -> Operation:
            conn.execute(
                operations.update()
                .where(operations.c.operation_id == operation_id, operations.c.state.in_(q.OPEN))
                .values(
                    state=state_text(OperationState.REJECTED),
                    state_changed_at=now,
                    rejection_reason=reason[:MAX_REJECTION_REASON_CHARS],
                    attempt_lease_until=None,
                    attempt_lease_holder=None,
                )
            )
            return _operations.operation_txn(conn, operation_id)

        return self.transactions.batched(work)

    # Reading and settling operations.

    def get_operation(self, operation_id: str) -> Operation:
        """Return the operation with that id (SUPERSEDED when pending and no longer current), or raise NotFound."""
        with self.transactions.read() as conn:
            return _operations.operation_txn(conn, operation_id)

    def list_operations(
        self,
        states: Sequence[OperationState],
        changed_before: datetime,
        limit: int,
        after: tuple[datetime, str] | None,
        *,
        case_id: str | None = None,
    ) -> list[Operation]:
        """Return operations in states that entered them before changed_before (only case_id's when given),
        oldest first, after a page key."""
        with self.transactions.read() as conn:
            return _operations.list_operations_txn(conn, states, changed_before, limit, after, case_id=case_id)

    def tally(self) -> OperationTally:
        """Return the operations per state and the decision time of the oldest open one, from one snapshot."""
        with self.transactions.read() as conn:
            return _operations.tally_txn(conn)

    def settle(self, settlements: Sequence[Settlement]) -> list[tuple[Operation | None, bool]]:
        """Record lookups in one transaction: APPLIED with a receipt commits an open operation; every
        lookup is noted. Returns, per settlement, the operation (None if unknown) and whether it settled."""
        with self.transactions.write() as conn:
            return _operations.settle_txn(conn, settlements)
