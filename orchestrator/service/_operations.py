"""Operations: the reconciler's API (list open operations, settle them by lookup, re-drive them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from decisionflow.vocabulary import OPEN_STATES, CaseId, OperationId, OperationState
from decisionflow_server.foundation.errors import KeyRetentionExceeded
from orchestrator.domain import DecisionResult, Listing, Operation, Settlement
from orchestrator.errors import NotRedrivable
from orchestrator.service._decisions import DecisionService
from orchestrator.service._in_time import answer_by, answer_from_store
from orchestrator.store import AsyncOrchestratorStore


class OperationService:
    """ListOperations, SettleOperation/BatchSettleOperations and RedriveOperation over validated input."""

    def __init__(
        self, store: AsyncOrchestratorStore, decisions: DecisionService, clock: Callable[[], datetime]
    ) -> None:
        self._store = store
        self._decisions = decisions
        self._clock = clock

    async def redrive(
        self, operation_id: OperationId, deadline: float | None, reply_by: float | None = None
    ) -> DecisionResult:
        """Call Apply again with the same key and the stored payload (APPROVED or UNKNOWN only).

        Apply gets until deadline; should the work outlast reply_by, the answer is the operation as
        stored then, and the work carries on to record the receiver's answer. Raises KeyRetentionExceeded
        when the receiver refused it for its key retention: the operation stays UNKNOWN; escalate it.
        """
        operation = await self._store.get_operation(operation_id)
        if operation.state not in OPEN_STATES or operation.decision is None:
            raise NotRedrivable(operation_id, operation.state)
        proposal = await self._store.get_proposal(operation_id)
        work = self._decisions.drive(proposal, operation.decision, deadline, replay=False)
        early = answer_from_store(self._store, operation_id, operation.decision.decision, self._clock())
        result = await answer_by(reply_by, work, early)
        refusal = result.retention_refusal
        if refusal is not None:
            raise KeyRetentionExceeded(operation_id, refusal.first_attempted_at, refusal.key_retention)
        return result

    async def settle(self, settlements: Sequence[Settlement], settled_by: str) -> list[tuple[Operation | None, bool]]:
        """Record what lookups showed: APPLIED with a receipt commits an open operation; all are noted.

        The audit log's settlement leaves name settled_by, the principal whose call settled them."""
        return await self._store.settle(settlements, settled_by=settled_by)

    async def list_operations(
        self,
        states: Sequence[OperationState],
        min_age: timedelta,
        limit: int,
        after: tuple[datetime, OperationId] | None,
        *,
        case_id: CaseId | None = None,
        counted: bool = False,
    ) -> Listing[Operation]:
        """Return operations in states for at least min_age (only case_id's when given), oldest first;
        counted: with how many match over every page, from the page's snapshot."""
        changed_before = self._clock() - min_age
        return await self._store.operations_listing(
            states, changed_before, limit, after, case_id=case_id, counted=counted
        )
