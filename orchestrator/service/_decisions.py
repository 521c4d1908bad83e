"""Decisions: Approve's checks, the resumed workflow's commit step, replays and driving the effect.

The state machine of an approved operation: the decision is recorded once (APPROVED), the
attempt is recorded durably before Apply is sent (UNKNOWN), and the receiver's answer settles
it (COMMITTED or REJECTED); an indeterminate answer leaves it UNKNOWN for a re-drive or a lookup.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from decisionflow import tracing
from decisionflow.auth import check_four_eyes
from decisionflow.errors import Unavailable
from decisionflow.failpoints import Failpoints
from orchestrator.checkpoints import RunCheckpoints
from orchestrator.domain import (
    OPEN_STATES,
    Decision,
    DecisionResult,
    Operation,
    Outcome,
    Proposal,
    RecordedDecision,
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
from orchestrator.failpoints import AFTER_ATTEMPT, AFTER_DECISION, AFTER_RECEIVER_OK
from orchestrator.ports import EffectIndeterminate, EffectPort, EffectRefused
from orchestrator.service._in_time import answer_by, recorded_answer
from orchestrator.service._runs import ReviewRuns
from orchestrator.store import AsyncOrchestratorStore, DecisionAlreadyRecorded
from orchestrator.workflow import ReviewAnswer, ReviewRequest

logger = logging.getLogger("decisionflow.orchestrator")


class DecisionService:
    """Approve, and the effect it drives; also the re-drive of an open operation."""

    def __init__(
        self,
        store: AsyncOrchestratorStore,
        runs: ReviewRuns,
        effects: EffectPort,
        failpoints: Failpoints,
        clock: Callable[[], datetime],
        *,
        four_eyes: bool,
    ) -> None:
        self._store = store
        self._runs = runs
        self._effects = effects
        self._failpoints = failpoints
        self._clock = clock
        self._four_eyes = four_eyes

    async def decide(
        self,
        operation_id: str,
        decision: Decision,
        reviewer: str,
        deadline: float | None,
        reply_by: float | None = None,
    ) -> DecisionResult:
        """Record reviewer's decision on exactly this operation and, on approval, write its effect once.

        Apply gets until deadline; should the work outlast reply_by (both time.monotonic() instants)
        once the decision is recorded, the answer is the operation as stored then (outcome Unknown
        while the effect is open) and the work carries on to record the receiver's answer.
        """
        started_at = self._clock()

        async def recorded() -> DecisionResult | None:
            try:
                operation = await self._store.get_operation(operation_id)
            except (NotFound, Unavailable):
                return None
            return recorded_answer(operation, decision, started_at)

        return await answer_by(reply_by, self._decide(operation_id, decision, reviewer, deadline), recorded)

    async def _decide(
        self, operation_id: str, decision: Decision, reviewer: str, deadline: float | None
    ) -> DecisionResult:
        inputs = await self._store.decision_inputs(operation_id)
        recorded = inputs.operation.decision
        if recorded is not None:
            return await self._replay(recorded, decision, deadline, inputs.operation, inputs.proposal)
        proposal = inputs.proposal
        if self._four_eyes:
            # Every author in the edit chain, not only the last editor: an edit of one character by
            # a colleague must not let the original author approve their own text.
            authors = await self._store.edit_chain_authors(operation_id)
            check_four_eyes(authors | {proposal.created_by}, reviewer, enabled=True)
        current = inputs.current_operation_id
        if current != operation_id:
            raise StaleProposal(operation_id, current or "")
        review = inputs.review
        if review is None:
            raise NotFound("pending review", operation_id)
        running = self._runs.workflow.identity
        recorded_wf = (review.workflow_name, review.workflow_version, review.graph_signature)
        if recorded_wf != (running.name, running.version, running.graph_signature):
            raise WorkflowVersionMismatch(
                operation_id, f"{review.workflow_name}@{review.workflow_version}", running.label()
            )
        run = self._runs.checkpoints(operation_id)
        # Verified before the framework sees it: a tampered row is refused here, never unpickled.
        checkpoint = run.admit(inputs.checkpoint)
        if checkpoint is None:
            raise CheckpointIntegrity(
                review.checkpoint_id, "the pending review's checkpoint is missing", operation_id=operation_id
            )

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
        result: DecisionResult = await self._runs.workflow.resume_and_answer(
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
            await self._store.record_decision(decided, proposal.case_id, run.take_final())
        except DecisionAlreadyRecorded as race:
            return await self._replay(race.recorded, decided.decision, deadline)
        self._failpoints.hit(AFTER_DECISION)
        _log("decision recorded", proposal, decided.reviewer, decided.decision.value)
        if decided.decision is Decision.DECLINE:
            operation = await self._store.get_operation(proposal.operation_id)
            return DecisionResult(operation, Outcome.DECLINED, replay=False)
        try:
            return await self.drive(proposal, decided, deadline, replay=False)
        except NotRedrivable:
            # A replay of this decision (another approver, on this or another replica) drove the
            # effect between our decision and our attempt: this call still recorded the decision,
            # so it reports the outcome that replay settled, not a refusal.
            operation = await self._store.get_operation(proposal.operation_id)
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
            operation = await self._store.get_operation(recorded.operation_id)
        if recorded.decision is Decision.APPROVE and operation.state in OPEN_STATES:
            if proposal is None:
                proposal = await self._store.get_proposal(recorded.operation_id)
            try:
                return await self.drive(proposal, recorded, deadline, replay=True)
            except NotRedrivable:
                # Settled by a concurrent call between our read and the attempt: report that.
                operation = await self._store.get_operation(recorded.operation_id)
        return DecisionResult(operation, outcome_of(operation.state), replay=True)

    async def drive(
        self, proposal: Proposal, decided: RecordedDecision, deadline: float | None, *, replay: bool
    ) -> DecisionResult:
        """Record an attempt, then Apply the stored payload once under the operation id and record the answer.

        Raises NotRedrivable when the operation is no longer APPROVED or UNKNOWN.
        """
        payload, digest = effect_payload(proposal, decided)
        operation = await self._store.record_attempt(proposal.operation_id, payload, digest, self._clock())
        self._failpoints.hit(AFTER_ATTEMPT)
        # The store keeps the first attempt's payload: every re-drive sends the same bytes and digest.
        assert operation.payload is not None and operation.payload_digest is not None
        try:
            receipt = await self._effects.apply(
                proposal.operation_id,
                proposal.case_id,
                proposal.content.action,
                operation.payload,
                operation.payload_digest,
                deadline=deadline,
                # The receiver refuses a key it may have pruned; this is the time it judges by.
                first_attempted_at=operation.first_attempt_at,
            )
        except EffectRefused as refused:
            operation = await self._store.record_rejection(proposal.operation_id, str(refused), self._clock())
            _log("effect rejected", proposal, decided.reviewer, Outcome.REJECTED.value)
            return DecisionResult(operation, Outcome.REJECTED, replay)
        except EffectIndeterminate as unknown:
            operation = await self._store.get_operation(proposal.operation_id)
            # A warning: the effect may or may not exist until a re-drive or the reconciler settles it.
            _log(
                f"effect outcome unknown: {unknown}",
                proposal,
                decided.reviewer,
                Outcome.UNKNOWN.value,
                level=logging.WARNING,
            )
            return DecisionResult(operation, outcome_of(operation.state), replay)
        self._failpoints.hit(AFTER_RECEIVER_OK)
        operation = await self._store.record_receipt(proposal.operation_id, receipt, self._clock())
        _log("effect committed", proposal, decided.reviewer, outcome_of(operation.state).value)
        return DecisionResult(operation, outcome_of(operation.state), replay)


def _log(message: str, proposal: Proposal, principal: str, outcome: str, *, level: int = logging.INFO) -> None:
    tracing.annotate(operation_id=proposal.operation_id, case_id=proposal.case_id, outcome=outcome)
    logger.log(
        level,
        message,
        extra={
            "operation_id": proposal.operation_id,
            "case_id": proposal.case_id,
            "principal": principal,
            "outcome": outcome,
        },
    )
