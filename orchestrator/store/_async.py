"""The store for the async service: every call runs the sync store in a worker thread, in one place."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import ParamSpec, TypeVar

from decisionflow.vocabulary import OperationState as State
from decisionflow.vocabulary import Receipt
from orchestrator.domain import (
    DecisionInputs,
    FirstAttempt,
    Operation,
    PendingReview,
    Proposal,
    ProposalView,
    RecordedDecision,
    SealedCheckpoint,
    Settlement,
)
from orchestrator.store._checkpoints import CheckpointTable
from orchestrator.store._store import OrchestratorStore

P = ParamSpec("P")
T = TypeVar("T")


class AsyncOrchestratorStore:
    """OrchestratorStore's methods as coroutines; the database work never blocks the event loop."""

    def __init__(self, store: OrchestratorStore) -> None:
        self.sync = store

    @property
    def checkpoints(self) -> CheckpointTable:
        """The checkpoint table the workflow runs load earlier checkpoints from."""
        return self.sync.checkpoints

    @staticmethod
    async def _run(method: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(method, *args, **kwargs)

    async def create_proposal(
        self,
        proposal: Proposal,
        review: PendingReview,
        saved: Sequence[SealedCheckpoint],
        expected_operation_id: str | None = None,
    ) -> tuple[Proposal, bool]:
        """See OrchestratorStore.create_proposal."""
        return await self._run(self.sync.create_proposal, proposal, review, saved, expected_operation_id)

    async def start_inputs(
        self, operation_id: str, case_id: str, expected_operation_id: str | None
    ) -> tuple[Proposal, PendingReview] | None:
        """See OrchestratorStore.start_inputs."""
        return await self._run(self.sync.start_inputs, operation_id, case_id, expected_operation_id)

    async def create_edit(
        self, proposal: Proposal, expected_operation_id: str, review: PendingReview, saved: Sequence[SealedCheckpoint]
    ) -> Proposal:
        """See OrchestratorStore.create_edit."""
        return await self._run(self.sync.create_edit, proposal, expected_operation_id, review, saved)

    async def current_operation_id(self, case_id: str) -> str | None:
        """See OrchestratorStore.current_operation_id."""
        return await self._run(self.sync.current_operation_id, case_id)

    async def get_proposal(self, operation_id: str) -> Proposal:
        """See OrchestratorStore.get_proposal."""
        return await self._run(self.sync.get_proposal, operation_id)

    async def find_proposal(self, operation_id: str) -> Proposal | None:
        """See OrchestratorStore.find_proposal."""
        return await self._run(self.sync.find_proposal, operation_id)

    async def get_pending_review(self, operation_id: str) -> PendingReview:
        """See OrchestratorStore.get_pending_review."""
        return await self._run(self.sync.get_pending_review, operation_id)

    async def proposal_view(self, operation_id: str) -> ProposalView:
        """See OrchestratorStore.proposal_view."""
        return await self._run(self.sync.proposal_view, operation_id)

    async def decision_inputs(self, operation_id: str) -> DecisionInputs:
        """See OrchestratorStore.decision_inputs."""
        return await self._run(self.sync.decision_inputs, operation_id)

    async def record_decision(
        self,
        decided: RecordedDecision,
        case_id: str,
        saved: Sequence[SealedCheckpoint],
        attempt: FirstAttempt | None = None,
    ) -> Operation:
        """See OrchestratorStore.record_decision."""
        return await self._run(self.sync.record_decision, decided, case_id, saved, attempt)

    async def record_attempt(
        self, operation_id: str, payload: bytes, digest: str, now: datetime, lease_until: datetime, *, holder: str
    ) -> Operation:
        """See OrchestratorStore.record_attempt."""
        return await self._run(self.sync.record_attempt, operation_id, payload, digest, now, lease_until, holder=holder)

    async def release_attempt(self, operation_id: str, lease_until: datetime) -> Operation:
        """See OrchestratorStore.release_attempt."""
        return await self._run(self.sync.release_attempt, operation_id, lease_until)

    async def record_receipt(self, operation_id: str, receipt: Receipt, now: datetime) -> Operation:
        """See OrchestratorStore.record_receipt."""
        return await self._run(self.sync.record_receipt, operation_id, receipt, now)

    async def record_rejection(self, operation_id: str, reason: str, now: datetime) -> Operation:
        """See OrchestratorStore.record_rejection."""
        return await self._run(self.sync.record_rejection, operation_id, reason, now)

    async def get_operation(self, operation_id: str) -> Operation:
        """See OrchestratorStore.get_operation."""
        return await self._run(self.sync.get_operation, operation_id)

    async def list_operations(
        self,
        states: Sequence[State],
        changed_before: datetime,
        limit: int,
        after: tuple[datetime, str] | None,
        *,
        case_id: str | None = None,
    ) -> list[Operation]:
        """See OrchestratorStore.list_operations."""
        return await self._run(self.sync.list_operations, states, changed_before, limit, after, case_id=case_id)

    async def settle(self, settlements: Sequence[Settlement]) -> list[tuple[Operation | None, bool]]:
        """See OrchestratorStore.settle."""
        return await self._run(self.sync.settle, settlements)
