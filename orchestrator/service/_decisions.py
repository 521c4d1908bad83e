"""Decisions: Approve's checks, the resumed workflow's commit step, replays and driving the effect.

The state machine of an approved operation: the decision is recorded once (APPROVED), the
attempt is recorded durably before Apply is sent (UNKNOWN), and the receiver's answer settles
it (COMMITTED, or REJECTED on a refusal of the payload); an indeterminate answer, or a refusal of
the orchestrator itself (credentials, role, capacity), leaves it UNKNOWN for a re-drive or a lookup.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from datetime import datetime

from decisionflow.retry import call_deadline
from decisionflow.review_rules import ReviewProgress
from decisionflow.vocabulary import OPEN_STATES, Decision, EffectRequest, OperationId, Outcome
from decisionflow_server.runtime import tracing
from decisionflow_server.runtime.auth import check_four_eyes
from decisionflow_server.runtime.failpoints import Failpoints
from orchestrator.checkpoints import RunCheckpoints
from orchestrator.domain import (
    DecisionInputs,
    DecisionResult,
    FirstAttempt,
    Operation,
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
    WorkflowProtocolError,
    WorkflowVersionMismatch,
)
from orchestrator.failpoints import AFTER_ATTEMPT, AFTER_DECISION, AFTER_RECEIVER_OK
from orchestrator.ports import (
    EffectIndeterminate,
    EffectPort,
    EffectRefused,
    KeyRetentionRefused,
    ReceiverRefusedCaller,
)
from orchestrator.service._attempts import Attempt, AttemptBudget, Leases
from orchestrator.service._in_time import answer_by, answer_from_store
from orchestrator.service._outcome_lines import log_outcome, refused_caller
from orchestrator.service._runs import ReviewRuns
from orchestrator.service._votes import Votes, check_open
from orchestrator.store import AsyncOrchestratorStore, DecisionAlreadyRecorded, ReviewRerouted
from orchestrator.workflow import ReviewAnswer, ReviewRequest

logger = logging.getLogger("decisionflow.orchestrator")

# How often one call decides again when its review is re-routed under it (an operator's rare act).
_REROUTES_FOLLOWED = 3


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
        attempt_budget: AttemptBudget,
    ) -> None:
        self._store = store
        self._runs = runs
        self._effects = effects
        self._failpoints = failpoints
        self._clock = clock
        self._four_eyes = four_eyes
        self._budget = attempt_budget
        self._leases = Leases(store, attempt_budget, clock)
        # The drive in flight per operation in this process; its answer (None: it ended without one).
        self._flights: dict[OperationId, asyncio.Future[DecisionResult | None]] = {}
        self._votes = Votes(store, self, clock)

    async def decide(
        self,
        operation_id: OperationId,
        decision: Decision,
        reviewer: str,
        deadline: float | None,
        reply_by: float | None = None,
        *,
        groups: frozenset[str] = frozenset(),
    ) -> DecisionResult:
        """Record reviewer's decision on exactly this operation and, on approval, write its effect once.

        Under a review rule other than the default one the decision is a vote (orchestrator.service._votes),
        decided by the groups reviewer holds; the effect is written once the votes complete the rule.
        Apply gets until deadline; should the work outlast reply_by (both time.monotonic() instants)
        once the decision is recorded, the answer is the operation as stored then (outcome Unknown
        while the effect is open) and the work carries on to record the receiver's answer.
        """
        early = answer_from_store(self._store, operation_id, decision, self._clock())
        return await answer_by(
            reply_by, self._decide_as_routed(operation_id, decision, reviewer, groups, deadline), early
        )

    async def _decide_as_routed(
        self,
        operation_id: OperationId,
        decision: Decision,
        reviewer: str,
        groups: frozenset[str],
        deadline: float | None,
    ) -> DecisionResult:
        """Decide under the rule the review follows when the decision is recorded: one re-routed meanwhile
        (reroute-reviews) is decided again under its new rule, a few times at most."""
        for _ in range(_REROUTES_FOLLOWED):
            try:
                return await self._decide(operation_id, decision, reviewer, groups, deadline)
            except ReviewRerouted:
                continue
        return await self._decide(operation_id, decision, reviewer, groups, deadline)

    async def _decide(
        self,
        operation_id: OperationId,
        decision: Decision,
        reviewer: str,
        groups: frozenset[str],
        deadline: float | None,
    ) -> DecisionResult:
        inputs = await self._store.decision_inputs(operation_id)
        recorded = inputs.operation.decision
        if recorded is not None:
            return await self.replay(recorded, decision, deadline, inputs.operation, inputs.proposal)
        proposal = inputs.proposal
        if proposal.rule is not None:
            return await self._votes.vote(inputs, decision, reviewer, groups, deadline)
        # Every author in the chain of edits and replacements, stored with the proposal: a colleague
        # changing one character, or replacing the proposal, must not let its author approve it.
        check_four_eyes(proposal.authors, reviewer, enabled=self._four_eyes)
        check_open(inputs)
        return await self.resume(inputs, decision, reviewer, deadline)

    async def resume(
        self,
        inputs: DecisionInputs,
        decision: Decision,
        reviewer: str,
        deadline: float | None,
        progress: ReviewProgress | None = None,
    ) -> DecisionResult:
        """Resume the pending review's workflow with reviewer's decision: its commit step records the
        decision once and, on approval, writes the effect once (the answer carries progress)."""
        operation_id = inputs.operation.operation_id
        proposal = inputs.proposal
        review = inputs.review
        if review is None:
            raise NotFound("pending review", operation_id)
        running = self._runs.workflow.identity
        recorded_wf = (review.workflow_name, review.workflow_version, review.graph_signature)
        if recorded_wf != (running.name, running.version, running.graph_signature):
            raise WorkflowVersionMismatch(
                operation_id, f"{review.workflow_name}@{review.workflow_version}", running.label()
            )
        run = self._runs.checkpoints(operation_id, keep=False)
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
            # The access line names the checkpoint the request was re-emitted from (one line per call).
            tracing.annotate(checkpoint_id=review.checkpoint_id)

        async def commit(answer: ReviewAnswer) -> DecisionResult:
            return await self._commit(proposal, answer, run, deadline, inputs.operation.rerouted_at)

        answer = ReviewAnswer(operation_id, decision.value, reviewer)
        result: DecisionResult = await self._runs.workflow.resume_and_answer(
            review.checkpoint_id, checkpoint, answer, run, check_request, commit
        )
        return result if progress is None else dataclasses.replace(result, progress=progress)

    async def _commit(
        self,
        proposal: Proposal,
        answer: ReviewAnswer,
        run: RunCheckpoints,
        deadline: float | None,
        rerouted_at: datetime | None,
    ) -> DecisionResult:
        if run.save_error is not None:
            raise CheckpointSaveFailed(f"checkpoint save failed: {run.save_error}") from run.save_error
        decided = RecordedDecision(answer.operation_id, Decision(answer.decision), answer.reviewer, self._clock())
        if decided.decision is Decision.DECLINE:
            try:
                operation = await self._store.record_decision(decided, proposal.case_id, (), rerouted_at=rerouted_at)
            except DecisionAlreadyRecorded as race:
                return await self.replay(race.recorded, decided.decision, deadline)
            self._failpoints.hit(AFTER_DECISION)
            log_outcome("decision recorded", proposal, decided.reviewer, decided.decision)
            return DecisionResult(operation, Outcome.DECLINED, replay=False)
        operation_id = proposal.operation_id
        # A replay that reads this decision before our Apply has answered awaits this drive. A drive
        # already in flight here means another replica decided first: our insert will say so.
        flight: asyncio.Future[DecisionResult | None] | None = None
        if operation_id not in self._flights:
            flight = self._flights[operation_id] = asyncio.get_running_loop().create_future()
        result: DecisionResult | None = None
        try:
            result = await self._decide_and_apply(proposal, decided, run, deadline, rerouted_at)
            return result
        except DecisionAlreadyRecorded as race:
            self._end_flight(operation_id, flight, None)
            flight = None
            return await self.replay(race.recorded, decided.decision, deadline)
        finally:
            self._end_flight(operation_id, flight, result)

    def _end_flight(
        self,
        operation_id: OperationId,
        flight: asyncio.Future[DecisionResult | None] | None,
        result: DecisionResult | None,
    ) -> None:
        if flight is not None and not flight.done():
            del self._flights[operation_id]
            flight.set_result(result)

    async def _decide_and_apply(
        self,
        proposal: Proposal,
        decided: RecordedDecision,
        run: RunCheckpoints,
        deadline: float | None,
        rerouted_at: datetime | None,
    ) -> DecisionResult:
        """Record the approval and its first attempt in one transaction (durable before Apply), then Apply."""
        payload, digest = effect_payload(proposal, decided)
        attempt = self._budget.start(decided.decided_at, deadline)
        operation = await self._store.record_decision(
            decided,
            proposal.case_id,
            (),
            FirstAttempt(payload, digest, attempt.lease_until, self._budget.holder),
            rerouted_at=rerouted_at,
        )
        log_outcome("decision recorded", proposal, decided.reviewer, decided.decision)
        # Both crash points are after the one transaction: the decision and the attempt are durable.
        return await self._apply_holding(proposal, decided, operation, attempt, replay=False)

    async def replay(
        self,
        recorded: RecordedDecision,
        requested: Decision,
        deadline: float | None,
        operation: Operation | None = None,
        proposal: Proposal | None = None,
    ) -> DecisionResult:
        """Report a recorded decision (operation and proposal as the caller just read them, else read here)."""
        if recorded.decision is not requested:
            raise DecisionConflict(recorded.operation_id, recorded.decision)
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

        Single flight: while a drive of the operation is in flight in this process, another caller
        awaits its answer; while an attempt on another replica holds the operation's lease, it waits
        for that attempt to settle or its lease to pass, within deadline (then: Unknown). The attempt
        itself gets at most the service's attempt budget. Raises NotRedrivable when the operation is
        no longer APPROVED or UNKNOWN.
        """
        operation_id = proposal.operation_id
        deadline = call_deadline(self._budget.seconds, deadline)
        while (flight := self._flights.get(operation_id)) is not None:
            try:
                led = await asyncio.wait_for(asyncio.shield(flight), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return await self._unsettled(operation_id, replay)
            if led is not None:
                return dataclasses.replace(led, replay=replay)
            # The drive in flight ended without an answer (an error, a cancelled call): drive here.
        flight = asyncio.get_running_loop().create_future()
        self._flights[operation_id] = flight
        result: DecisionResult | None = None
        try:
            result = await self._drive_leased(proposal, decided, deadline, replay)
            return result
        finally:
            del self._flights[operation_id]
            flight.set_result(result)

    async def _unsettled(self, operation_id: OperationId, replay: bool) -> DecisionResult:
        operation = await self._store.get_operation(operation_id)
        return DecisionResult(operation, outcome_of(operation.state), replay)

    async def _drive_leased(
        self, proposal: Proposal, decided: RecordedDecision, deadline: float, replay: bool
    ) -> DecisionResult:
        taken = await self._leases.take(proposal, decided, deadline)
        if isinstance(taken, Operation):
            return DecisionResult(taken, outcome_of(taken.state), replay)
        operation, attempt = taken
        return await self._apply_holding(proposal, decided, operation, attempt, replay=replay, first=False)

    async def _apply_holding(
        self,
        proposal: Proposal,
        decided: RecordedDecision,
        operation: Operation,
        attempt: Attempt,
        *,
        replay: bool,
        first: bool = True,
    ) -> DecisionResult:
        """Apply under the lease this call holds; released when this call fails and the process lives on."""
        try:
            if first:
                self._failpoints.hit(AFTER_DECISION)
            self._failpoints.hit(AFTER_ATTEMPT)
            return await self._apply(proposal, decided, operation, attempt, replay)
        except Exception:
            # This process lives on: the next caller need not wait for the lease to pass.
            try:
                await self._store.release_attempt(proposal.operation_id, attempt.lease_until)
            except Exception:
                logger.warning("could not release the attempt lease; it passes on its own", exc_info=True)
            raise

    async def _apply(
        self,
        proposal: Proposal,
        decided: RecordedDecision,
        operation: Operation,
        attempt: Attempt,
        replay: bool,
    ) -> DecisionResult:
        # The store keeps the first attempt's payload: every re-drive sends the same bytes and digest.
        assert operation.payload is not None and operation.payload_digest is not None
        try:
            request = EffectRequest(
                proposal.operation_id,
                proposal.case_id,
                proposal.content.action,
                operation.payload,
                operation.payload_digest,
                # The receiver refuses a key it may have pruned; this is the time it judges by.
                first_attempted_at=operation.first_attempt_at,
            )
            receipt = await self._effects.apply(request, deadline=attempt.apply_by)
        except EffectRefused as refused:
            operation = await self._store.record_rejection(proposal.operation_id, str(refused), self._clock())
            log_outcome("effect rejected", proposal, decided.reviewer, Outcome.REJECTED)
            return DecisionResult(operation, Outcome.REJECTED, replay)
        except EffectIndeterminate as unknown:
            operation = await self._store.release_attempt(proposal.operation_id, attempt.lease_until)
            if isinstance(unknown, ReceiverRefusedCaller):
                # An error: no approval commits until an operator fixes the credentials or the receiver.
                log_outcome(
                    refused_caller(proposal, unknown), proposal, decided.reviewer, Outcome.UNKNOWN, code=unknown.code
                )
            else:
                # A warning: the effect may or may not exist until a re-drive or the reconciler settles it.
                log_outcome(f"effect outcome unknown: {unknown}", proposal, decided.reviewer, Outcome.UNKNOWN)
            retention = unknown.refusal if isinstance(unknown, KeyRetentionRefused) else None
            return DecisionResult(operation, outcome_of(operation.state), replay, retention)
        self._failpoints.hit(AFTER_RECEIVER_OK)
        operation = await self._store.record_receipt(proposal.operation_id, receipt, self._clock())
        log_outcome("effect committed", proposal, decided.reviewer, outcome_of(operation.state))
        return DecisionResult(operation, outcome_of(operation.state), replay)
