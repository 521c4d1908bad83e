"""Workflow runs of one request: the checkpoint storage they save into, and opening a review."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from decisionflow.vocabulary import OperationId
from decisionflow_server.runtime.failpoints import Failpoints
from orchestrator.checkpoints import CheckpointSealer, RunCheckpoints
from orchestrator.domain import PendingReview, Proposal, SealedCheckpoint
from orchestrator.errors import CheckpointSaveFailed
from orchestrator.failpoints import CHECKPOINT_SAVE
from orchestrator.store import AsyncOrchestratorStore
from orchestrator.workflow import ReviewTask, ReviewWorkflow


class ReviewRuns:
    """Starts workflow runs whose checkpoints are sealed and written with the request's own rows."""

    def __init__(
        self,
        store: AsyncOrchestratorStore,
        workflow: ReviewWorkflow,
        sealer: CheckpointSealer,
        failpoints: Failpoints,
        clock: Callable[[], datetime],
    ) -> None:
        self.workflow = workflow
        self._store = store
        self._sealer = sealer
        self._failpoints = failpoints
        self._clock = clock

    def checkpoints(self, operation_id: OperationId, *, keep: bool = True) -> RunCheckpoints:
        """Return the checkpoint storage of one run on operation_id (keep=False: a resume, which keeps none)."""
        return RunCheckpoints(
            self._store.checkpoints,
            self._sealer,
            operation_id,
            self._clock,
            before_save=lambda: self._failpoints.hit(CHECKPOINT_SAVE),
            keep=keep,
        )

    async def open_review(self, proposal: Proposal) -> tuple[PendingReview, list[SealedCheckpoint]]:
        """Run the workflow until the proposal's review request is pending; return the review and the
        sealed checkpoint it resumes from, not yet written (the caller writes it with its own rows)."""
        run = self.checkpoints(proposal.operation_id)
        try:
            checkpoint_id = await self.workflow.open(ReviewTask(proposal.operation_id, proposal.case_id), run)
        finally:
            # The framework only logs a failed save; a missing checkpoint must fail the request.
            if run.save_error is not None:
                raise CheckpointSaveFailed(f"checkpoint save failed: {run.save_error}") from run.save_error
        wf = self.workflow.identity
        review = PendingReview(
            proposal.operation_id, wf.name, wf.version, wf.graph_signature, checkpoint_id, self._clock()
        )
        return review, run.take_pending(checkpoint_id)
