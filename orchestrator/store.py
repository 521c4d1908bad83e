"""The orchestrator's database (SQLAlchemy Core). Each public method is one transaction;
helpers ending in ``_txn`` join the caller's. Rows leave as frozen domain dataclasses.

Once-per-key rules are constraints: a proposal per operation id (primary key), a decision
per operation id (primary key), and the case's current proposal moves only by
compare-and-set.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from decisionflow import db
from decisionflow.errors import Unavailable
from orchestrator.checkpoints import CheckpointTable, SealedCheckpoint, sealed_checkpoint
from orchestrator.domain import (
    OPEN_STATES,
    Consistency,
    Decision,
    LookupNote,
    LookupStatus,
    Operation,
    PendingReview,
    Proposal,
    ProposalContent,
    Receipt,
    RecordedDecision,
    State,
    evidence_from_json,
    evidence_to_json,
    policy_from_json,
    policy_to_json,
)
from orchestrator.errors import NotFound, NotRedrivable, StaleProposal
from orchestrator.schema import cases, checkpoints, decisions, operations, pending_reviews, proposals

_OPEN = [s.value for s in OPEN_STATES]

_LOOKUP_NOTE_VALUES: dict[str, sa.BindParameter[object]] = {
    name: sa.bindparam(f"b_{name}")
    for name in ("last_lookup_at", "last_lookup_status", "last_lookup_consistency", "last_lookup_error")
}
# Executed with many parameter sets by settle(); rows are locked and known open beforehand.
_NOTE_LOOKUP = (
    operations.update().where(operations.c.operation_id == sa.bindparam("b_operation_id")).values(_LOOKUP_NOTE_VALUES)
)
_COMMIT_BY_LOOKUP = (
    operations.update()
    .where(operations.c.operation_id == sa.bindparam("b_operation_id"))
    .values(
        state=State.COMMITTED.value,
        state_changed_at=sa.bindparam("b_last_lookup_at"),
        receipt_id=sa.bindparam("b_receipt_id"),
        receipt_applied_at=sa.bindparam("b_receipt_applied_at"),
        **_LOOKUP_NOTE_VALUES,
    )
)


# Statements of the Approve path, built once: a statement built per call is compiled from the
# cache but still pays for its construction and cache key, which cost more than SQLite's work.
_OPERATIONS = (
    sa.select(
        operations,
        decisions.c.decision,
        decisions.c.reviewer,
        decisions.c.decided_at,
        cases.c.current_operation_id,
    )
    .select_from(operations)
    .outerjoin(decisions, decisions.c.operation_id == operations.c.operation_id)
    .outerjoin(cases, cases.c.case_id == operations.c.case_id)
)
_OPERATION_BY_ID = _OPERATIONS.where(operations.c.operation_id == sa.bindparam("b_operation_id"))
# Everything Approve reads before deciding, in one statement: the operation with any recorded
# decision and the case's current proposal, the proposal, the pending review and its checkpoint.
_DECISION_INPUTS = (
    _OPERATIONS.add_columns(
        *(c.label(f"p_{c.name}") for c in proposals.c),
        *(c.label(f"r_{c.name}") for c in pending_reviews.c),
        *(c.label(f"k_{c.name}") for c in checkpoints.c),
    )
    .join(proposals, proposals.c.operation_id == operations.c.operation_id)
    .outerjoin(pending_reviews, pending_reviews.c.operation_id == operations.c.operation_id)
    .outerjoin(checkpoints, checkpoints.c.checkpoint_id == pending_reviews.c.checkpoint_id)
    .where(operations.c.operation_id == sa.bindparam("b_operation_id"))
)
_CURRENT_FOR_UPDATE = (
    sa.select(cases.c.current_operation_id).where(cases.c.case_id == sa.bindparam("b_case_id")).with_for_update()
)
_DECIDE = (
    operations.update()
    .where(operations.c.operation_id == sa.bindparam("b_operation_id"))
    .values(state=sa.bindparam("b_state"), state_changed_at=sa.bindparam("b_now"))
)
_OPEN_ONLY = (operations.c.operation_id == sa.bindparam("b_operation_id"), operations.c.state.in_(_OPEN))
_RECORD_ATTEMPT = (
    operations.update()
    .where(*_OPEN_ONLY)
    .values(
        state=State.UNKNOWN.value,
        state_changed_at=sa.case(
            (operations.c.state == State.UNKNOWN.value, operations.c.state_changed_at), else_=sa.bindparam("b_now")
        ),
        attempts=operations.c.attempts + 1,
        first_attempt_at=sa.func.coalesce(operations.c.first_attempt_at, sa.bindparam("b_now")),
        last_attempt_at=sa.bindparam("b_now"),
        payload=sa.func.coalesce(operations.c.payload, sa.bindparam("b_payload")),
        payload_digest=sa.func.coalesce(operations.c.payload_digest, sa.bindparam("b_digest")),
    )
)
_RECORD_RECEIPT = (
    operations.update()
    .where(*_OPEN_ONLY)
    .values(
        state=State.COMMITTED.value,
        state_changed_at=sa.bindparam("b_now"),
        receipt_id=sa.bindparam("b_receipt_id"),
        receipt_applied_at=sa.bindparam("b_applied_at"),
    )
)


@dataclass(frozen=True, slots=True)
class DecisionInputs:
    """What Approve reads before deciding, from one snapshot."""

    operation: Operation
    proposal: Proposal
    current_operation_id: str | None
    review: PendingReview | None
    checkpoint: SealedCheckpoint | None


class DecisionAlreadyRecorded(Exception):
    """The ledger already holds a decision for the operation (carried as ``recorded``)."""

    def __init__(self, recorded: RecordedDecision) -> None:
        super().__init__(f"{recorded.operation_id} already decided: {recorded.decision}")
        self.recorded = recorded


@dataclass(frozen=True, slots=True)
class Settlement:
    """What one lookup at the receiver showed, to be recorded for an operation."""

    operation_id: str
    status: LookupStatus
    consistency: Consistency
    receipt: Receipt | None
    error: str
    looked_up_at: datetime


def _utc(value: datetime | None) -> datetime | None:
    # SQLite hands back naive datetimes; everything is stored in UTC.
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _must(value: datetime | None) -> datetime:
    assert value is not None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _proposal_from(m: sa.RowMapping, prefix: str = "") -> Proposal:
    return Proposal(
        operation_id=m[prefix + "operation_id"],
        content=ProposalContent(
            m[prefix + "case_id"],
            m[prefix + "action"],
            m[prefix + "body"],
            evidence_from_json(m[prefix + "evidence_json"]),
            policy_from_json(m[prefix + "policy_json"]),
        ),
        evidence_id=m[prefix + "evidence_id"],
        policy_id=m[prefix + "policy_id"],
        human_edited=bool(m[prefix + "human_edited"]),
        parent_operation_id=m[prefix + "parent_operation_id"],
        created_by=m[prefix + "created_by"],
        created_at=_must(m[prefix + "created_at"]),
    )


def _review_from(m: sa.RowMapping, prefix: str = "") -> PendingReview:
    return PendingReview(
        m[prefix + "operation_id"],
        m[prefix + "workflow_name"],
        m[prefix + "workflow_version"],
        m[prefix + "graph_signature"],
        m[prefix + "checkpoint_id"],
        _must(m[prefix + "created_at"]),
        m[prefix + "retired_checkpoint_id"],
    )


class OrchestratorStore:
    """Proposals, pending reviews, the decision ledger, operation states and checkpoints."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.checkpoints = CheckpointTable(engine)
        # SQLite runs one write transaction at a time (BEGIN IMMEDIATE). Threads of this process
        # that find the write lock taken would wait in SQLite's busy handler, which sleeps in
        # steps of up to 100 ms; queueing them on a lock here hands the database over at once.
        # Other processes on the same file still wait through the busy timeout.
        self._write_turn: AbstractContextManager[object] = threading.Lock() if db.is_sqlite(engine) else nullcontext()

    @contextmanager
    def _begin(self) -> Iterator[sa.Connection]:
        try:
            with self._write_turn, self.engine.begin() as conn:
                yield conn
        except OperationalError as exc:
            raise Unavailable(f"database unavailable: {exc.orig}") from exc

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        try:
            with db.reading(self.engine) as conn:
                yield conn
        except OperationalError as exc:
            raise Unavailable(f"database unavailable: {exc.orig}") from exc

    # Proposals and pending reviews.

    def create_proposal(
        self, proposal: Proposal, review: PendingReview, saved: Sequence[SealedCheckpoint]
    ) -> tuple[Proposal, bool]:
        """Record a new proposal, its pending review and checkpoints, and make it the case's current one.

        Returns the stored proposal and whether this call created it; the same content
        started twice returns the first proposal unchanged.
        """
        try:
            with self._begin() as conn:
                self._insert_proposal_txn(conn, proposal, review, saved)
                self._set_current_txn(conn, proposal.case_id, proposal.operation_id, proposal.created_at)
        except IntegrityError:
            existing = self.get_proposal(proposal.operation_id)
            return existing, False
        return proposal, True

    def create_edit(
        self,
        proposal: Proposal,
        expected_operation_id: str,
        review: PendingReview,
        saved: Sequence[SealedCheckpoint],
    ) -> Proposal:
        """Record an edited proposal and move the case's current pointer from expected to it (or refuse as stale)."""
        with self._begin() as conn:
            try:
                with conn.begin_nested():
                    self._insert_proposal_txn(conn, proposal, review, saved)
            except IntegrityError:
                pass  # the edited content already exists as a proposal; it becomes current again
            moved = conn.execute(
                cases.update()
                .where(cases.c.case_id == proposal.case_id, cases.c.current_operation_id == expected_operation_id)
                .values(current_operation_id=proposal.operation_id, updated_at=proposal.created_at)
            ).rowcount
            if moved != 1:
                current = self._current_txn(conn, proposal.case_id)
                raise StaleProposal(expected_operation_id, current or "")
        return self.get_proposal(proposal.operation_id)

    def _insert_proposal_txn(
        self,
        conn: sa.Connection,
        proposal: Proposal,
        review: PendingReview,
        saved: Sequence[SealedCheckpoint],
    ) -> None:
        content = proposal.content
        conn.execute(
            proposals.insert().values(
                operation_id=proposal.operation_id,
                case_id=content.case_id,
                action=content.action,
                body=content.body,
                evidence_json=evidence_to_json(content.evidence),
                evidence_id=proposal.evidence_id,
                policy_json=policy_to_json(content.policy),
                policy_id=proposal.policy_id,
                human_edited=proposal.human_edited,
                parent_operation_id=proposal.parent_operation_id,
                created_by=proposal.created_by,
                created_at=proposal.created_at,
            )
        )
        conn.execute(
            operations.insert().values(
                operation_id=proposal.operation_id,
                case_id=content.case_id,
                state=State.PENDING_REVIEW.value,
                state_changed_at=proposal.created_at,
                attempts=0,
            )
        )
        self._insert_review_txn(conn, review)
        self.checkpoints.insert_txn(conn, saved)

    def _insert_review_txn(self, conn: sa.Connection, review: PendingReview) -> None:
        conn.execute(
            pending_reviews.insert().values(
                operation_id=review.operation_id,
                workflow_name=review.workflow_name,
                workflow_version=review.workflow_version,
                graph_signature=review.graph_signature,
                checkpoint_id=review.checkpoint_id,
                created_at=review.created_at,
            )
        )

    def _set_current_txn(self, conn: sa.Connection, case_id: str, operation_id: str, now: datetime) -> None:
        updated = conn.execute(
            cases.update().where(cases.c.case_id == case_id).values(current_operation_id=operation_id, updated_at=now)
        ).rowcount
        if updated == 0:
            conn.execute(cases.insert().values(case_id=case_id, current_operation_id=operation_id, updated_at=now))

    def _current_txn(self, conn: sa.Connection, case_id: str) -> str | None:
        query = sa.select(cases.c.current_operation_id).where(cases.c.case_id == case_id)
        return conn.execute(query).scalar_one_or_none()

    def current_operation_id(self, case_id: str) -> str | None:
        """Return the operation id of the case's current proposal, if the case exists."""
        with self._read() as conn:
            return self._current_txn(conn, case_id)

    def get_proposal(self, operation_id: str) -> Proposal:
        """Return the proposal with that operation id, or raise NotFound."""
        with self._read() as conn:
            row = conn.execute(sa.select(proposals).where(proposals.c.operation_id == operation_id)).first()
        if row is None:
            raise NotFound("operation", operation_id)
        return _proposal_from(row._mapping)

    def get_pending_review(self, operation_id: str) -> PendingReview:
        """Return the pending review of an operation, or raise NotFound."""
        with self._read() as conn:
            row = conn.execute(sa.select(pending_reviews).where(pending_reviews.c.operation_id == operation_id)).first()
        if row is None:
            raise NotFound("pending review", operation_id)
        return _review_from(row._mapping)

    def decision_inputs(self, operation_id: str) -> DecisionInputs:
        """Return the operation (with any recorded decision), its proposal, the case's current operation id
        and the pending review with its still-sealed checkpoint, read together; raise NotFound."""
        with self._read() as conn:
            row = conn.execute(_DECISION_INPUTS, {"b_operation_id": operation_id}).first()
        if row is None:
            raise NotFound("operation", operation_id)
        m = row._mapping
        return DecisionInputs(
            operation=self._operation_from_row(row),
            proposal=_proposal_from(m, "p_"),
            current_operation_id=m["current_operation_id"],
            review=None if m["r_operation_id"] is None else _review_from(m, "r_"),
            checkpoint=None if m["k_checkpoint_id"] is None else sealed_checkpoint(m, "k_"),
        )

    # The decision ledger and the effect record.

    def record_decision(
        self, decided: RecordedDecision, case_id: str, saved: Sequence[SealedCheckpoint]
    ) -> RecordedDecision:
        """Insert the decision once; raise DecisionAlreadyRecorded when one exists, StaleProposal when the
        operation is no longer the case's current proposal (an existing decision wins over staleness)."""
        state = State.APPROVED if decided.decision is Decision.APPROVE else State.DECLINED
        try:
            with self._begin() as conn:
                conn.execute(
                    decisions.insert(),
                    {
                        "operation_id": decided.operation_id,
                        "decision": decided.decision.value,
                        "reviewer": decided.reviewer,
                        "decided_at": decided.decided_at,
                    },
                )
                current = conn.execute(_CURRENT_FOR_UPDATE, {"b_case_id": case_id}).scalar_one_or_none()
                if current != decided.operation_id:
                    raise StaleProposal(decided.operation_id, current or "")
                conn.execute(
                    _DECIDE,
                    {"b_operation_id": decided.operation_id, "b_state": state.value, "b_now": decided.decided_at},
                )
                self.checkpoints.insert_txn(conn, saved)
        except IntegrityError as exc:
            recorded = self.get_decision(decided.operation_id)
            if recorded is None:
                raise
            raise DecisionAlreadyRecorded(recorded) from exc
        return decided

    def get_decision(self, operation_id: str) -> RecordedDecision | None:
        """Return the recorded decision of an operation, if any."""
        with self._read() as conn:
            row = conn.execute(sa.select(decisions).where(decisions.c.operation_id == operation_id)).first()
        if row is None:
            return None
        return RecordedDecision(row.operation_id, Decision(row.decision), row.reviewer, _must(row.decided_at))

    def record_attempt(self, operation_id: str, payload: bytes, digest: str, now: datetime) -> Operation:
        """Durably note an Apply about to be sent (state UNKNOWN until the receiver answers).

        The payload is stored on the first attempt and reused by every later one.
        """
        with self._begin() as conn:
            updated = conn.execute(
                _RECORD_ATTEMPT,
                {"b_operation_id": operation_id, "b_now": now, "b_payload": payload, "b_digest": digest},
            ).rowcount
            operation = self._operation_txn(conn, operation_id)
        if updated != 1:
            raise NotRedrivable(operation_id, operation.state.value)
        return operation

    def record_receipt(self, operation_id: str, receipt: Receipt, now: datetime) -> Operation:
        """Move an open operation to COMMITTED with the receiver's receipt (a second receipt is ignored)."""
        with self._begin() as conn:
            conn.execute(
                _RECORD_RECEIPT,
                {
                    "b_operation_id": operation_id,
                    "b_now": now,
                    "b_receipt_id": receipt.receipt_id,
                    "b_applied_at": receipt.applied_at,
                },
            )
            return self._operation_txn(conn, operation_id)

    def record_rejection(self, operation_id: str, reason: str, now: datetime) -> Operation:
        """Move an open operation to REJECTED: the receiver definitely refused the effect."""
        with self._begin() as conn:
            conn.execute(
                operations.update()
                .where(operations.c.operation_id == operation_id, operations.c.state.in_(_OPEN))
                .values(state=State.REJECTED.value, state_changed_at=now, rejection_reason=reason[:2000])
            )
        return self.get_operation(operation_id)

    # Reading operations.

    def get_operation(self, operation_id: str) -> Operation:
        """Return the operation with that id (SUPERSEDED when pending and no longer current), or raise NotFound."""
        with self._read() as conn:
            return self._operation_txn(conn, operation_id)

    def _operation_txn(self, conn: sa.Connection, operation_id: str) -> Operation:
        row = conn.execute(_OPERATION_BY_ID, {"b_operation_id": operation_id}).first()
        if row is None:
            raise NotFound("operation", operation_id)
        return self._operation_from_row(row)

    def _operation_query(self) -> sa.Select[tuple[object, ...]]:
        return _OPERATIONS

    def _operation_from_row(self, row: sa.Row[tuple[object, ...]]) -> Operation:
        m = row._mapping
        state = State(m["state"])
        if state is State.PENDING_REVIEW and m["current_operation_id"] != m["operation_id"]:
            state = State.SUPERSEDED
        decision = None
        if m["decision"] is not None:
            decision = RecordedDecision(
                m["operation_id"], Decision(m["decision"]), m["reviewer"], _must(m["decided_at"])
            )
        receipt = None
        if m["receipt_id"] is not None:
            receipt = Receipt(m["receipt_id"], _must(m["receipt_applied_at"]))
        lookup = None
        if m["last_lookup_at"] is not None:
            lookup = LookupNote(
                _must(m["last_lookup_at"]),
                LookupStatus(m["last_lookup_status"]),
                Consistency(m["last_lookup_consistency"]),
                m["last_lookup_error"] or "",
            )
        return Operation(
            operation_id=m["operation_id"],
            case_id=m["case_id"],
            state=state,
            state_changed_at=_must(m["state_changed_at"]),
            decision=decision,
            attempts=int(m["attempts"]),
            first_attempt_at=_utc(m["first_attempt_at"]),
            receipt=receipt,
            rejection_reason=m["rejection_reason"],
            last_lookup=lookup,
            payload=None if m["payload"] is None else bytes(m["payload"]),
            payload_digest=m["payload_digest"],
        )

    def list_operations(
        self,
        states: Sequence[State],
        changed_before: datetime,
        limit: int,
        after: tuple[datetime, str] | None,
    ) -> list[Operation]:
        """Return operations in states that entered them before changed_before, oldest first, after a page key."""
        query = self._operation_query().where(
            operations.c.state.in_([s.value for s in states]), operations.c.state_changed_at <= changed_before
        )
        if after is not None:
            at, op = after
            query = query.where(
                sa.or_(
                    operations.c.state_changed_at > at,
                    sa.and_(operations.c.state_changed_at == at, operations.c.operation_id > op),
                )
            )
        query = query.order_by(operations.c.state_changed_at, operations.c.operation_id).limit(limit)
        with self._read() as conn:
            return [self._operation_from_row(row) for row in conn.execute(query)]

    # Settling by lookup.

    def settle(self, settlements: Sequence[Settlement]) -> list[tuple[Operation | None, bool]]:
        """Record lookups in one transaction: APPLIED with a receipt commits an open operation; every
        lookup is noted. Returns, per settlement, the operation (None if unknown) and whether it settled."""
        ids = sorted({s.operation_id for s in settlements})
        settled_flags: list[bool] = []
        with self._begin() as conn:
            # Lock the rows first, in one order, so concurrent reconcilers cannot both count the
            # same operation as settled (PostgreSQL re-checks the state after waiting) and cannot
            # deadlock on rows taken in different orders. SQLite's BEGIN IMMEDIATE serialises anyway.
            open_ids = set(
                conn.execute(
                    sa.select(operations.c.operation_id)
                    .where(operations.c.operation_id.in_(ids), operations.c.state.in_(_OPEN))
                    .order_by(operations.c.operation_id)
                    .with_for_update()
                ).scalars()
            )
            commits: list[dict[str, object]] = []
            notes: list[dict[str, object]] = []
            for s in settlements:
                values: dict[str, object] = {
                    "b_operation_id": s.operation_id,
                    "b_last_lookup_at": s.looked_up_at,
                    "b_last_lookup_status": s.status.value,
                    "b_last_lookup_consistency": s.consistency.value,
                    "b_last_lookup_error": s.error or None,
                }
                settled = s.status is LookupStatus.APPLIED and s.receipt is not None and s.operation_id in open_ids
                if settled:
                    assert s.receipt is not None
                    open_ids.discard(s.operation_id)
                    commits.append(
                        {**values, "b_receipt_id": s.receipt.receipt_id, "b_receipt_applied_at": s.receipt.applied_at}
                    )
                else:
                    notes.append(values)
                settled_flags.append(settled)
            # One statement per kind, executed with many parameter sets: building a statement per
            # row cost more than the database work (a reconciler settles thousands per second).
            if commits:
                conn.execute(_COMMIT_BY_LOOKUP, commits)
            if notes:
                conn.execute(_NOTE_LOOKUP, notes)
        with self._read() as conn:
            rows = conn.execute(self._operation_query().where(operations.c.operation_id.in_(ids))).all()
        by_id = {r._mapping["operation_id"]: self._operation_from_row(r) for r in rows}
        return [(by_id.get(s.operation_id), flag) for s, flag in zip(settlements, settled_flags, strict=True)]

    # Housekeeping.

    def count_checkpoints(self, operation_id: str | None = None) -> int:
        """Return the number of stored checkpoints (of one operation, if given)."""
        query = sa.select(sa.func.count()).select_from(checkpoints)
        if operation_id is not None:
            query = query.where(checkpoints.c.operation_id == operation_id)
        with self._read() as conn:
            return int(conn.execute(query).scalar_one())


MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "alembic_version_orchestrator"


def migrate(engine: Engine) -> None:
    """Bring the orchestrator database to the newest schema revision."""
    db.migrate(engine, MIGRATIONS, VERSION_TABLE)


SETTLED_STATES = (State.COMMITTED, State.DECLINED, State.REJECTED)


def _settled_before_txn(conn: sa.Connection, cutoff: datetime) -> sa.Select[tuple[str]]:
    return sa.select(operations.c.operation_id).where(
        operations.c.state.in_([s.value for s in SETTLED_STATES]), operations.c.state_changed_at < cutoff
    )


class Housekeeping:
    """Operator maintenance on the orchestrator database: pruning and re-opening reviews."""

    def __init__(self, store: OrchestratorStore) -> None:
        self._store = store

    def prune_checkpoints(self, cutoff: datetime, *, dry_run: bool) -> int:
        """Delete the checkpoints of operations settled before cutoff; proposals, decisions and receipts stay.

        Checkpoints of pending reviews (any operation not settled) are never touched.
        """
        with self._store._begin() as conn:
            settled = _settled_before_txn(conn, cutoff)
            if dry_run:
                query = sa.select(sa.func.count()).select_from(checkpoints)
                return int(conn.execute(query.where(checkpoints.c.operation_id.in_(settled))).scalar_one())
            return int(conn.execute(checkpoints.delete().where(checkpoints.c.operation_id.in_(settled))).rowcount)

    def reviews_outside(self, name: str, version: str, graph_signature: str) -> list[PendingReview]:
        """Return undecided pending reviews recorded under another workflow name, version or graph."""
        query = (
            sa.select(pending_reviews)
            .join(operations, operations.c.operation_id == pending_reviews.c.operation_id)
            .where(
                operations.c.state == State.PENDING_REVIEW.value,
                sa.or_(
                    pending_reviews.c.workflow_name != name,
                    pending_reviews.c.workflow_version != version,
                    pending_reviews.c.graph_signature != graph_signature,
                ),
            )
            .order_by(pending_reviews.c.created_at)
        )
        with self._store._read() as conn:
            rows = conn.execute(query).all()
        return [
            PendingReview(
                r.operation_id,
                r.workflow_name,
                r.workflow_version,
                r.graph_signature,
                r.checkpoint_id,
                _must(r.created_at),
                r.retired_checkpoint_id,
            )
            for r in rows
        ]

    def reopen(self, old: PendingReview, new: PendingReview, saved: Sequence[SealedCheckpoint]) -> bool:
        """Point an undecided pending review at a checkpoint of the running workflow; retire the old one.

        Returns False (and changes nothing) if the review was decided or re-opened meanwhile.
        """
        with self._store._begin() as conn:
            moved = conn.execute(
                pending_reviews.update()
                .where(
                    pending_reviews.c.operation_id == old.operation_id,
                    pending_reviews.c.checkpoint_id == old.checkpoint_id,
                    ~sa.exists().where(decisions.c.operation_id == old.operation_id),
                )
                .values(
                    workflow_name=new.workflow_name,
                    workflow_version=new.workflow_version,
                    graph_signature=new.graph_signature,
                    checkpoint_id=new.checkpoint_id,
                    retired_checkpoint_id=old.checkpoint_id,
                )
            ).rowcount
            if moved != 1:
                return False
            self._store.checkpoints.insert_txn(conn, saved)
        return True
