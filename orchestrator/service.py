"""Orchestrator use cases: start, edit, decide, re-drive, settle (docs/review-protocol.md, docs/reconciler.md).

Approve checks, in order: a decision is given; (authentication happened at the boundary);
a recorded decision wins (same → replay, different → conflict); the operation must be the
case's current proposal; the pending review must come from the running workflow graph;
then the workflow resumes from its checkpoint and the ``commit`` step records the decision
once, records the attempt, and calls the receiver with the operation id as key.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from decisionflow import reasons
from decisionflow.auth import check_four_eyes
from decisionflow.errors import DomainError, FieldViolation, InvalidRequest
from decisionflow.failpoints import Failpoints
from decisionflow.identity import EvidenceItem, PolicyRef, identities, normalise
from orchestrator.checkpoints import CheckpointSealer, RunCheckpoints
from orchestrator.domain import (
    OPEN_STATES,
    Decision,
    DecisionResult,
    Operation,
    Outcome,
    PendingReview,
    Proposal,
    ProposalContent,
    Receipt,
    RecordedDecision,
    State,
    effect_payload,
    outcome_of,
)
from orchestrator.errors import (
    CheckpointIntegrity,
    CheckpointSaveFailed,
    DecisionConflict,
    NotFound,
    NotRedrivable,
    StaleProposal,
    WorkflowProtocolError,
    WorkflowVersionMismatch,
)
from orchestrator.failpoints import AFTER_ATTEMPT, AFTER_DECISION, AFTER_RECEIVER_OK, CHECKPOINT_SAVE
from orchestrator.store import DecisionAlreadyRecorded, OrchestratorStore, Settlement
from orchestrator.validation import check_case_id, check_content, check_operation_id
from orchestrator.workflow import ReviewAnswer, ReviewRequest, ReviewTask, ReviewWorkflow

logger = logging.getLogger("decisionflow.orchestrator")


class EffectRefused(Exception):
    """The receiver definitely refused the effect; nothing was written."""


class EffectIndeterminate(Exception):
    """The effect may or may not have been written (deadline, unavailable after send, crash)."""


class EffectPort(Protocol):
    """The seam to the EffectReceiver: Apply with the operation id as idempotency key."""

    async def apply(
        self, operation_id: str, case_id: str, kind: str, payload: bytes, payload_digest: str, *, deadline: float | None
    ) -> Receipt:
        """Write the effect once; raise EffectRefused or EffectIndeterminate."""
        ...


@dataclass(frozen=True, slots=True)
class StartedReview:
    """A proposal with its pending review; created is False when the same content existed."""

    proposal: Proposal
    review: PendingReview
    created: bool


class OrchestratorService:
    """The orchestrator's use cases over its store, the review workflow and the receiver."""

    def __init__(
        self,
        store: OrchestratorStore,
        workflow: ReviewWorkflow,
        sealer: CheckpointSealer,
        effects: EffectPort,
        failpoints: Failpoints,
        clock: Callable[[], datetime],
        *,
        four_eyes: bool = False,
    ) -> None:
        self._store = store
        self._workflow = workflow
        self._sealer = sealer
        self._effects = effects
        self._failpoints = failpoints
        self._clock = clock
        self._four_eyes = four_eyes

    def _run_checkpoints(self, operation_id: str) -> RunCheckpoints:
        return RunCheckpoints(
            self._store.checkpoints,
            self._sealer,
            operation_id,
            self._clock,
            before_save=lambda: self._failpoints.hit(CHECKPOINT_SAVE),
        )

    async def _open_review(self, proposal: Proposal) -> tuple[PendingReview, RunCheckpoints]:
        run = self._run_checkpoints(proposal.operation_id)
        try:
            checkpoint_id = await self._workflow.open(ReviewTask(proposal.operation_id, proposal.case_id), run)
        finally:
            # The framework only logs a failed save; a missing checkpoint must fail the request.
            if run.save_error is not None:
                raise CheckpointSaveFailed(f"checkpoint save failed: {run.save_error}") from run.save_error
        wf = self._workflow.identity
        review = PendingReview(
            proposal.operation_id, wf.name, wf.version, wf.graph_signature, checkpoint_id, self._clock()
        )
        return review, run

    # Proposals.

    async def start_review(
        self,
        case_id: str,
        action: str,
        body: str,
        evidence: Sequence[EvidenceItem],
        policy: PolicyRef | None,
        author: str,
    ) -> StartedReview:
        """Record a proposal and open its pending review; the same content again returns the first proposal."""
        check_content(case_id, action, body, evidence, policy)
        assert policy is not None
        content = _content(case_id, action, body, evidence, policy)
        ids = identities(content.case_id, content.action, content.body, content.evidence, content.policy)
        existing = await asyncio.to_thread(self._find_proposal, ids.operation_id)
        if existing is not None:
            review = await asyncio.to_thread(self._store.get_pending_review, existing.operation_id)
            return StartedReview(existing, review, False)
        proposal = Proposal(
            ids.operation_id, content, ids.evidence_id, ids.policy_id, False, None, author, self._clock()
        )
        review, run = await self._open_review(proposal)
        stored, created = await asyncio.to_thread(self._store.create_proposal, proposal, review, run.take_pending())
        if not created:
            review = await asyncio.to_thread(self._store.get_pending_review, stored.operation_id)
        logger.info(
            "review started" if created else "review exists",
            extra={"operation_id": stored.operation_id, "case_id": case_id, "principal": author},
        )
        return StartedReview(stored, review, created)

    def _find_proposal(self, operation_id: str) -> Proposal | None:
        try:
            return self._store.get_proposal(operation_id)
        except DomainError:
            return None

    async def edit_proposal(
        self,
        expected_operation_id: str,
        body: str,
        evidence: Sequence[EvidenceItem],
        policy: PolicyRef | None,
        editor: str,
    ) -> StartedReview:
        """Replace the case's current proposal if expected_operation_id is still current; else refuse as stale."""
        check_operation_id(expected_operation_id, "expected_operation_id")
        check_content(None, None, body, evidence, policy)
        assert policy is not None
        parent = await asyncio.to_thread(self._store.get_proposal, expected_operation_id)
        current = await asyncio.to_thread(self._store.current_operation_id, parent.case_id)
        if current != expected_operation_id:
            raise StaleProposal(expected_operation_id, current or "")
        content = _content(parent.case_id, parent.content.action, body, evidence, policy)
        ids = identities(content.case_id, content.action, content.body, content.evidence, content.policy)
        if ids.operation_id == expected_operation_id:
            review = await asyncio.to_thread(self._store.get_pending_review, expected_operation_id)
            return StartedReview(parent, review, False)
        proposal = Proposal(
            ids.operation_id,
            content,
            ids.evidence_id,
            ids.policy_id,
            True,
            expected_operation_id,
            editor,
            self._clock(),
        )
        review, run = await self._open_review(proposal)
        stored = await asyncio.to_thread(
            self._store.create_edit, proposal, expected_operation_id, review, run.take_pending()
        )
        review = await asyncio.to_thread(self._store.get_pending_review, stored.operation_id)
        logger.info(
            "proposal edited",
            extra={"operation_id": stored.operation_id, "case_id": parent.case_id, "principal": editor},
        )
        return StartedReview(stored, review, stored.operation_id == proposal.operation_id)

    async def get_proposal(self, operation_id: str | None, case_id: str | None) -> tuple[Proposal, Operation, bool]:
        """Return a proposal (by operation id, or the case's current one), its operation and whether it is current."""
        if bool(operation_id) == bool(case_id):
            raise InvalidRequest([FieldViolation("operation_id", "set exactly one of operation_id and case_id")])
        if case_id:
            violations = check_case_id(case_id)
            if violations:
                raise InvalidRequest(violations)
            current = await asyncio.to_thread(self._store.current_operation_id, case_id)
            if current is None:
                raise NotFound("case", case_id)
            operation_id = current
        assert operation_id is not None
        check_operation_id(operation_id)
        proposal = await asyncio.to_thread(self._store.get_proposal, operation_id)
        operation = await asyncio.to_thread(self._store.get_operation, operation_id)
        current = await asyncio.to_thread(self._store.current_operation_id, proposal.case_id)
        return proposal, operation, current == operation_id

    async def get_operation(self, operation_id: str) -> Operation:
        """Return the operation's state, decision, receipt and last lookup."""
        check_operation_id(operation_id)
        return await asyncio.to_thread(self._store.get_operation, operation_id)

    # Decisions.

    async def decide(
        self, operation_id: str, decision: Decision | None, reviewer: str, deadline: float | None
    ) -> DecisionResult:
        """Record reviewer's decision on exactly this operation and, on approval, write its effect once."""
        if decision is None:
            raise InvalidRequest(
                [FieldViolation("decision", "required: an omitted decision is not consent")],
                reason=reasons.DECISION_REQUIRED,
            )
        check_operation_id(operation_id)
        inputs = await asyncio.to_thread(self._store.decision_inputs, operation_id)
        recorded = inputs.operation.decision
        if recorded is not None:
            return await self._replay(recorded, decision, deadline, inputs.operation, inputs.proposal)
        proposal = inputs.proposal
        check_four_eyes(proposal.created_by, reviewer, self._four_eyes)
        current = inputs.current_operation_id
        if current != operation_id:
            raise StaleProposal(operation_id, current or "")
        review = inputs.review
        if review is None:
            raise NotFound("pending review", operation_id)
        running = self._workflow.identity
        recorded_wf = (review.workflow_name, review.workflow_version, review.graph_signature)
        if recorded_wf != (running.name, running.version, running.graph_signature):
            raise WorkflowVersionMismatch(
                operation_id, f"{review.workflow_name}@{review.workflow_version}", running.label()
            )
        run = self._run_checkpoints(operation_id)
        # Verified before the framework sees it: a tampered row is refused here, never unpickled.
        checkpoint = run.admit(inputs.checkpoint)
        if checkpoint is None:
            raise CheckpointIntegrity(review.checkpoint_id, "the pending review's checkpoint is missing")

        def check_request(request: ReviewRequest) -> None:
            if request.operation_id != operation_id:
                raise WorkflowProtocolError(
                    f"checkpoint {review.checkpoint_id} re-emitted a request for {request.operation_id}"
                )
            logger.info(
                "review request re-emitted from checkpoint %s",
                review.checkpoint_id,
                extra={"operation_id": operation_id, "case_id": proposal.case_id, "principal": reviewer},
            )

        async def commit(answer: ReviewAnswer) -> DecisionResult:
            return await self._commit(proposal, answer, run, deadline)

        answer = ReviewAnswer(operation_id, decision.value, reviewer)
        result: DecisionResult = await self._workflow.resume_and_answer(
            review.checkpoint_id, checkpoint, answer, run, check_request, commit
        )
        return result

    async def _commit(
        self, proposal: Proposal, answer: ReviewAnswer, run: RunCheckpoints, deadline: float | None
    ) -> DecisionResult:
        if run.save_error is not None:
            raise CheckpointSaveFailed(f"checkpoint save failed: {run.save_error}") from run.save_error
        decided = RecordedDecision(answer.operation_id, Decision(answer.decision), answer.reviewer, self._clock())
        try:
            await asyncio.to_thread(self._store.record_decision, decided, proposal.case_id, run.take_final())
        except DecisionAlreadyRecorded as race:
            return await self._replay(race.recorded, decided.decision, deadline)
        self._failpoints.hit(AFTER_DECISION)
        self._log("decision recorded", proposal, decided.reviewer, decided.decision.value)
        if decided.decision is Decision.DECLINE:
            operation = await asyncio.to_thread(self._store.get_operation, proposal.operation_id)
            return DecisionResult(operation, Outcome.DECLINED, replay=False)
        try:
            return await self._drive(proposal, decided, deadline, replay=False)
        except NotRedrivable:
            # A replay of this decision (another approver, on this or another replica) drove the
            # effect between our decision and our attempt: this call still recorded the decision,
            # so it reports the outcome that replay settled, not a refusal.
            operation = await asyncio.to_thread(self._store.get_operation, proposal.operation_id)
            return DecisionResult(operation, outcome_of(operation.state), replay=False)

    async def _replay(
        self,
        recorded: RecordedDecision,
        requested: Decision,
        deadline: float | None,
        operation: Operation | None = None,
        proposal: Proposal | None = None,
    ) -> DecisionResult:
        """Report a recorded decision (operation and proposal as the caller just read them, else read here)."""
        if recorded.decision is not requested:
            raise DecisionConflict(recorded.operation_id, recorded.decision.value)
        if operation is None:
            operation = await asyncio.to_thread(self._store.get_operation, recorded.operation_id)
        if recorded.decision is Decision.APPROVE and operation.state in OPEN_STATES:
            if proposal is None:
                proposal = await asyncio.to_thread(self._store.get_proposal, recorded.operation_id)
            try:
                return await self._drive(proposal, recorded, deadline, replay=True)
            except NotRedrivable:
                # Settled by a concurrent call between our read and the attempt: report that.
                operation = await asyncio.to_thread(self._store.get_operation, recorded.operation_id)
        return DecisionResult(operation, outcome_of(operation.state), replay=True)

    async def _drive(
        self, proposal: Proposal, decided: RecordedDecision, deadline: float | None, *, replay: bool
    ) -> DecisionResult:
        payload, digest = effect_payload(proposal, decided)
        operation = await asyncio.to_thread(
            self._store.record_attempt, proposal.operation_id, payload, digest, self._clock()
        )
        self._failpoints.hit(AFTER_ATTEMPT)
        assert operation.payload is not None and operation.payload_digest is not None
        try:
            receipt = await self._effects.apply(
                proposal.operation_id,
                proposal.case_id,
                proposal.content.action,
                operation.payload,
                operation.payload_digest,
                deadline=deadline,
            )
        except EffectRefused as refused:
            operation = await asyncio.to_thread(
                self._store.record_rejection, proposal.operation_id, str(refused), self._clock()
            )
            self._log("effect rejected", proposal, decided.reviewer, Outcome.REJECTED.value)
            return DecisionResult(operation, Outcome.REJECTED, replay)
        except EffectIndeterminate as unknown:
            operation = await asyncio.to_thread(self._store.get_operation, proposal.operation_id)
            self._log(f"effect outcome unknown: {unknown}", proposal, decided.reviewer, Outcome.UNKNOWN.value)
            return DecisionResult(operation, outcome_of(operation.state), replay)
        self._failpoints.hit(AFTER_RECEIVER_OK)
        operation = await asyncio.to_thread(self._store.record_receipt, proposal.operation_id, receipt, self._clock())
        self._log("effect committed", proposal, decided.reviewer, outcome_of(operation.state).value)
        return DecisionResult(operation, outcome_of(operation.state), replay)

    def _log(self, message: str, proposal: Proposal, principal: str, outcome: str) -> None:
        logger.info(
            message,
            extra={
                "operation_id": proposal.operation_id,
                "case_id": proposal.case_id,
                "principal": principal,
                "outcome": outcome,
            },
        )

    # Operations (the reconciler's API).

    async def redrive(self, operation_id: str, deadline: float | None) -> DecisionResult:
        """Call Apply again with the same key and the stored payload (APPROVED or UNKNOWN only)."""
        check_operation_id(operation_id)
        operation = await asyncio.to_thread(self._store.get_operation, operation_id)
        if operation.state not in OPEN_STATES or operation.decision is None:
            raise NotRedrivable(operation_id, operation.state.value)
        proposal = await asyncio.to_thread(self._store.get_proposal, operation_id)
        return await self._drive(proposal, operation.decision, deadline, replay=False)

    async def settle(self, settlements: Sequence[Settlement]) -> list[tuple[Operation | None, bool]]:
        """Record what lookups showed: APPLIED with a receipt commits an open operation; all are noted."""
        for i, s in enumerate(settlements):
            check_operation_id(s.operation_id, f"settlements[{i}].operation_id")
        return await asyncio.to_thread(self._store.settle, settlements)

    async def list_operations(
        self, states: Sequence[State], min_age: timedelta, limit: int, after: tuple[datetime, str] | None
    ) -> list[Operation]:
        """Return operations in states for at least min_age, oldest first."""
        return await asyncio.to_thread(self._store.list_operations, states, self._clock() - min_age, limit, after)


def _content(
    case_id: str, action: str, body: str, evidence: Sequence[EvidenceItem], policy: PolicyRef
) -> ProposalContent:
    ordered = tuple(sorted(evidence, key=lambda e: e.source_id))
    return ProposalContent(case_id, action, normalise(body), ordered, policy)
