"""A plain model of the orchestrator's store: what each write must leave and answer, in dictionaries.

The rules are written from the store's contract (its docstrings and the design), not from its SQL:
a proposal per operation id, the case's current pointer moved by the rules of start, replace and
edit, one decision per operation, attempts under a lease, receipts and rejections only on open
operations, lookups noted and settled, checkpoints pruned when settled or superseded, and the audit
log's leaves: one per event that changes what a case means, none for a write that changes nothing
(docs/audit-log.md, "What is logged"). Each method returns what the store must answer, or raises the
refusal it must raise; a refusal changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from decisionflow.transparency import (
    DecisionLeaf,
    EffectLeaf,
    Leaf,
    ProposalLeaf,
    RejectionLeaf,
    SettlementLeaf,
)
from decisionflow.vocabulary import OPEN_STATES, Decision, LookupStatus, OperationId, OperationState, Receipt
from orchestrator.domain import (
    LookupNote,
    Operation,
    OperationTally,
    PendingReview,
    PendingReviewEntry,
    Proposal,
    RecordedDecision,
    Settlement,
    carry_authors,
)
from orchestrator.store import SETTLED_STATES

MAX_REJECTION_REASON_CHARS = 2000


class Refused(Exception):
    """The refusal the store must raise: its class name and the values it carries."""

    def __init__(self, kind: str, *values: object) -> None:
        super().__init__(kind, *values)
        self.kind = kind
        self.values = values


@dataclass
class StoredOperation:
    """An operation's row as the model keeps it (its state as stored: never SUPERSEDED)."""

    operation_id: str
    case_id: str
    state: OperationState
    state_changed_at: datetime
    attempts: int = 0
    first_attempt_at: datetime | None = None
    lease_until: datetime | None = None
    lease_holder: str | None = None
    payload: bytes | None = None
    payload_digest: str | None = None
    receipt: Receipt | None = None
    rejection_reason: str | None = None
    last_lookup: LookupNote | None = None
    rerouted_at: datetime | None = None


@dataclass
class StoreModel:
    """Proposals, operations, decisions, reviews, cases and checkpoints, as the store must hold them."""

    proposals: dict[str, Proposal] = field(default_factory=dict)
    operations: dict[str, StoredOperation] = field(default_factory=dict)
    decisions: dict[str, RecordedDecision] = field(default_factory=dict)
    reviews: dict[str, PendingReview] = field(default_factory=dict)
    # case id -> (current operation id, when the pointer last moved)
    cases: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    # checkpoint id -> operation id
    checkpoints: dict[str, str] = field(default_factory=dict)
    # The audit log's leaves, in the order their events were recorded.
    leaves: list[Leaf] = field(default_factory=list)

    # Reads.

    def operation(self, operation_id: str) -> Operation:
        """The operation as a read must return it (SUPERSEDED derived), or NotFound."""
        stored = self.operations.get(operation_id)
        if stored is None:
            raise Refused("NotFound", "operation", operation_id)
        state = stored.state
        if state is OperationState.PENDING_REVIEW and self.current(stored.case_id) != operation_id:
            state = OperationState.SUPERSEDED
        return Operation(
            operation_id=stored.operation_id,  # type: ignore[arg-type]
            case_id=stored.case_id,  # type: ignore[arg-type]
            state=state,
            state_changed_at=stored.state_changed_at,
            decision=self.decisions.get(operation_id),
            attempts=stored.attempts,
            first_attempt_at=stored.first_attempt_at,
            receipt=stored.receipt,
            rejection_reason=stored.rejection_reason,
            last_lookup=stored.last_lookup,
            payload=stored.payload,
            payload_digest=stored.payload_digest,
            attempt_lease_until=stored.lease_until,
            attempt_lease_holder=stored.lease_holder,
            rerouted_at=stored.rerouted_at,
        )

    def current(self, case_id: str) -> OperationId | None:
        """The case's current operation id, if the case exists."""
        entry = self.cases.get(case_id)
        return None if entry is None else OperationId(entry[0])

    def all_operations(self) -> list[Operation]:
        """Every operation, oldest state change first (then by id), as list_operations pages them."""
        ordered = sorted(self.operations.values(), key=lambda o: (o.state_changed_at, o.operation_id))
        return [self.operation(o.operation_id) for o in ordered]

    def tally(self) -> OperationTally:
        """Operations per state shown, and the decision time of the oldest open operation."""
        by_state = dict.fromkeys(OperationState, 0)
        for operation in self.all_operations():
            by_state[operation.state] += 1
        open_decided = [
            self.decisions[o.operation_id].decided_at
            for o in self.operations.values()
            if o.state in OPEN_STATES and o.operation_id in self.decisions
        ]
        return OperationTally(by_state, min(open_decided, default=None))

    def pending_reviews(self) -> list[PendingReviewEntry]:
        """Every case's undecided current proposal, oldest first, with its chain's length."""
        entries = [
            PendingReviewEntry(self.proposals[op], self.reviews[op], self.versions(op), stored.state_changed_at)
            for op, stored in self.operations.items()
            if stored.state is OperationState.PENDING_REVIEW and self.current(stored.case_id) == op
        ]
        return sorted(entries, key=lambda e: (e.pending_since, e.proposal.operation_id))

    def versions(self, operation_id: str) -> int:
        """How many proposals the chain of parents from operation_id holds, itself included."""
        seen: set[str] = set()
        at: str | None = operation_id
        while at is not None and at not in seen and at in self.proposals:
            seen.add(at)
            at = self.proposals[at].parent_operation_id
        return len(seen)

    # Proposals.

    def create_proposal(
        self, proposal: Proposal, review: PendingReview, saved: Sequence[str], expected: str | None
    ) -> tuple[Proposal, bool]:
        """StartReview's write: the same content returns the first proposal; other content takes the case."""
        existing = self.proposals.get(proposal.operation_id)
        if existing is not None:
            return existing, False
        case_id = proposal.case_id
        current = self.current(case_id)
        if expected is not None:
            if current != expected:
                raise Refused("StaleProposal", expected, current or "")
        elif current is not None and self.operations[current].state is OperationState.PENDING_REVIEW:
            raise Refused("CaseHasOpenProposal", case_id, current)
        stored = self._insert(proposal, review, saved)
        self.cases[case_id] = (proposal.operation_id, proposal.created_at)
        event = "started" if expected is None else "replaced"
        self._proposal_leaf(stored, event, stored.created_by, stored.created_at, expected)
        return stored, True

    def create_edit(self, proposal: Proposal, expected: str, review: PendingReview, saved: Sequence[str]) -> Proposal:
        """EditProposal's write: compare-and-set of the case's pointer; existing content becomes current again."""
        case_id = proposal.case_id
        if self.current(case_id) != expected:
            raise Refused("StaleProposal", expected, self.current(case_id) or "")
        existing = self.proposals.get(proposal.operation_id)
        if existing is None:
            self._insert(proposal, review, saved)
        elif self.operations[proposal.operation_id].state is OperationState.PENDING_REVIEW:
            old = self.reviews[proposal.operation_id]
            self.reviews[proposal.operation_id] = replace(
                old,
                workflow_name=review.workflow_name,
                workflow_version=review.workflow_version,
                graph_signature=review.graph_signature,
                checkpoint_id=review.checkpoint_id,
                retired_checkpoint_id=old.checkpoint_id,
            )
            self.checkpoints.update(dict.fromkeys(saved, proposal.operation_id))
        self.cases[case_id] = (proposal.operation_id, proposal.created_at)
        # Edited back to content that exists, the leaf holds that proposal with this edit's editor and time.
        stored = self.proposals[proposal.operation_id]
        self._proposal_leaf(stored, "edited", proposal.created_by, proposal.created_at, expected)
        return stored

    def _proposal_leaf(self, stored: Proposal, event: str, principal: str, at: datetime, previous: str | None) -> None:
        content = stored.content
        self.leaves.append(
            ProposalLeaf(
                at,
                event,
                principal,
                content.case_id,
                stored.operation_id,
                None if previous is None else OperationId(previous),
                content.action,
                content.body,
                content.evidence,
                content.policy,
                stored.rule,
            )
        )

    def _insert(self, proposal: Proposal, review: PendingReview, saved: Sequence[str]) -> Proposal:
        parent = None if proposal.parent_operation_id is None else self.proposals.get(proposal.parent_operation_id)
        stored = carry_authors(proposal, parent)
        self.proposals[proposal.operation_id] = stored
        self.operations[proposal.operation_id] = StoredOperation(
            proposal.operation_id, proposal.case_id, OperationState.PENDING_REVIEW, proposal.created_at
        )
        self.reviews[proposal.operation_id] = review
        self.checkpoints.update(dict.fromkeys(saved, proposal.operation_id))
        return stored

    # Decisions and attempts.

    def record_decision(
        self,
        decided: RecordedDecision,
        saved: Sequence[str],
        attempt: tuple[bytes, str, datetime, str] | None,
        rerouted_at: datetime | None = None,
    ) -> Operation:
        """One decision per operation, on the case's current proposal only, while its review is pending (not
        expired) and was last re-routed when the deciding call read it (rerouted_at); an approval may carry its
        first attempt."""
        op = decided.operation_id
        if op in self.decisions:
            raise Refused("DecisionAlreadyRecorded", self.decisions[op])
        stored = self.operations[op]
        current = self.current(stored.case_id)
        if current != op:
            raise Refused("StaleProposal", op, current or "")
        if stored.state is not OperationState.PENDING_REVIEW:
            raise Refused("ReviewExpired", op)
        if stored.rerouted_at != rerouted_at:
            raise Refused("ReviewRerouted", op)
        self.decisions[op] = decided
        self.leaves.append(DecisionLeaf(decided.decided_at, op, decided.decision.value, decided.reviewer))
        stored.state_changed_at = decided.decided_at
        if attempt is None:
            approve = decided.decision is Decision.APPROVE
            stored.state = OperationState.APPROVED if approve else OperationState.DECLINED
        else:
            payload, digest, lease_until, holder = attempt
            self._attempt(stored, payload, digest, decided.decided_at, lease_until, holder)
        self.checkpoints.update(dict.fromkeys(saved, op))
        return self.operation(op)

    def record_attempt(
        self,
        operation_id: str,
        payload: bytes,
        digest: str,
        now: datetime,
        lease_until: datetime,
        holder: str,
        ended_holder: str | None = None,
    ) -> Operation:
        """An attempt on an open operation whose lease is free, has passed, or is held in the name of
        ended_holder (a holder known to have ended); it keeps the first payload."""
        operation = self.operation(operation_id)
        stored = self.operations[operation_id]
        if stored.state not in OPEN_STATES:
            raise Refused("NotRedrivable", operation_id, operation.state)
        taken_over = ended_holder is not None and stored.lease_holder == ended_holder
        if stored.lease_until is not None and stored.lease_until > now and not taken_over:
            raise Refused("AttemptInFlight", operation)
        if stored.state is not OperationState.UNKNOWN:
            stored.state_changed_at = now
        self._attempt(stored, payload, digest, now, lease_until, holder)
        return self.operation(operation_id)

    @staticmethod
    def _attempt(
        stored: StoredOperation, payload: bytes, digest: str, now: datetime, lease_until: datetime, holder: str
    ) -> None:
        stored.state = OperationState.UNKNOWN
        stored.attempts += 1
        stored.first_attempt_at = stored.first_attempt_at or now
        stored.payload = stored.payload if stored.payload is not None else payload
        stored.payload_digest = stored.payload_digest if stored.payload_digest is not None else digest
        stored.lease_until, stored.lease_holder = lease_until, holder

    def release_attempt(self, operation_id: str, lease_until: datetime) -> Operation:
        """Only the holder of that very lease gives it up."""
        stored = self.operations[operation_id]
        if stored.lease_until == lease_until:
            stored.lease_until, stored.lease_holder = None, None
        return self.operation(operation_id)

    def record_receipt(self, operation_id: str, receipt: Receipt, now: datetime) -> Operation:
        """An open operation commits with the receipt; any other is reported as it stands."""
        stored = self.operations[operation_id]
        if stored.state in OPEN_STATES:
            stored.state, stored.state_changed_at, stored.receipt = OperationState.COMMITTED, now, receipt
            stored.lease_until, stored.lease_holder = None, None
            self.leaves.append(EffectLeaf(now, OperationId(operation_id), receipt.receipt_id, receipt.applied_at))
        return self.operation(operation_id)

    def record_rejection(self, operation_id: str, reason: str, now: datetime) -> Operation:
        """An open operation is rejected with the reason (cut to its limit); any other is reported as it stands."""
        stored = self.operations[operation_id]
        if stored.state in OPEN_STATES:
            stored.state, stored.state_changed_at = OperationState.REJECTED, now
            stored.rejection_reason = reason[:MAX_REJECTION_REASON_CHARS]
            stored.lease_until, stored.lease_holder = None, None
            self.leaves.append(RejectionLeaf(now, OperationId(operation_id), stored.rejection_reason))
        return self.operation(operation_id)

    # Settling and housekeeping.

    def settle(self, settlements: Sequence[Settlement], settled_by: str) -> list[tuple[Operation | None, bool]]:
        """Every lookup is noted; APPLIED with a receipt commits an open operation (distinct operations), with a
        settlement leaf naming settled_by."""
        flags: list[bool] = []
        for s in settlements:
            stored = self.operations.get(s.operation_id)
            if stored is None:
                flags.append(False)
                continue
            stored.last_lookup = LookupNote(s.looked_up_at, s.status, s.consistency, s.error)
            receipt = s.receipt if s.status is LookupStatus.APPLIED else None
            settled = receipt is not None and stored.state in OPEN_STATES
            if receipt is not None and settled:
                stored.state, stored.state_changed_at, stored.receipt = (
                    OperationState.COMMITTED,
                    s.looked_up_at,
                    s.receipt,
                )
                stored.lease_until, stored.lease_holder = None, None
                self.leaves.append(
                    SettlementLeaf(
                        s.looked_up_at,
                        s.operation_id,
                        OperationState.COMMITTED.value,
                        settled_by,
                        receipt.receipt_id,
                        receipt.applied_at,
                    )
                )
            flags.append(settled)
        return [
            (self.operation(s.operation_id) if s.operation_id in self.operations else None, flag)
            for s, flag in zip(settlements, flags, strict=True)
        ]

    def prune(self, cutoff: datetime, *, dry_run: bool) -> int:
        """Checkpoints of operations settled before cutoff, and of undecided proposals superseded on a
        case unmoved since cutoff."""

        def prunable(op: str) -> bool:
            stored = self.operations[op]
            if stored.state in SETTLED_STATES:
                return stored.state_changed_at < cutoff
            current, moved_at = self.cases[stored.case_id]
            return stored.state is OperationState.PENDING_REVIEW and current != op and moved_at < cutoff

        doomed = [cp for cp, op in self.checkpoints.items() if prunable(op)]
        if not dry_run:
            for cp in doomed:
                del self.checkpoints[cp]
        return len(doomed)
