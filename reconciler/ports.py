"""The two services as a pass sees them: the ports the clients satisfy, and the conversions between
client views (decisionflow.client) and the reconciler's domain."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from typing import Protocol

from decisionflow.client import (
    Consistency,
    Decision,
    LookupAnswer,
    LookupBatch,
    LookupStatus,
    OperationState,
    OperationView,
    RedriveResult,
    Settlement,
    SettleResult,
)
from decisionflow.vocabulary import OPEN_STATES, OperationId
from reconciler.domain import Action, LookupFinding, OpenOperation, Verdict


class OperationsPort(Protocol):
    """The orchestrator's OperationsService, as decisionflow.client.OperationsClient offers it."""

    def list_operations(
        self, states: Iterable[OperationState] = (), *, min_age: timedelta | None = None, page_size: int = 0
    ) -> Iterator[OperationView]:
        """Yield operations in states at least min_age old, oldest first."""
        ...

    def batch_settle_operations(self, settlements: Sequence[Settlement]) -> tuple[SettleResult, ...]:
        """Record lookups; results in request order."""
        ...

    def redrive_operation(self, operation_id: OperationId) -> RedriveResult:
        """Call Apply again with the stored payload."""
        ...


class ReceiverPort(Protocol):
    """The receiver's BatchLookup, as decisionflow.client.ReceiverClient offers it."""

    def batch_lookup(self, operation_ids: Sequence[OperationId]) -> LookupBatch:
        """Look up at most 1,000 operation ids; answers in request order."""
        ...


def open_operation(view: OperationView) -> OpenOperation | None:
    """Return the operation as the rules see it, or None when it is no longer APPROVED or UNKNOWN."""
    if view.state not in OPEN_STATES:
        return None
    return OpenOperation(
        operation_id=OperationId(view.operation_id),
        state=view.state,
        approved=view.decision is Decision.APPROVE,
        decided_at=view.decided_at,
        first_attempt_at=view.first_attempt_at,
        updated_at=view.updated_at,
    )


def answers_by_id(batch: LookupBatch) -> dict[OperationId, LookupAnswer]:
    """Return a batch lookup's answers under the operation id each answers."""
    return {OperationId(answer.operation_id): answer for answer in batch.results}


def finding(answer: LookupAnswer | None, error: str) -> LookupFinding:
    """Return what a lookup answer says (UNSPECIFIED with error when there is no usable answer)."""
    if answer is None:
        return LookupFinding(LookupStatus.UNSPECIFIED, error=error or "the receiver gave no answer for this id")
    strong = answer.consistency is Consistency.STRONG
    if answer.status is LookupStatus.APPLIED and answer.receipt is not None:
        return LookupFinding(LookupStatus.APPLIED, strong)
    if answer.status is LookupStatus.NOT_FOUND:
        return LookupFinding(LookupStatus.NOT_FOUND, strong)
    return LookupFinding(LookupStatus.UNSPECIFIED, error=f"unusable lookup answer: status {answer.status.value}")


def settlement(
    operation_id: OperationId, answer: LookupAnswer | None, found: LookupFinding, verdict: Verdict
) -> Settlement:
    """Return what SettleOperation records: the answer as given, the failure, or the escalation's reason."""
    if answer is None or found.status is LookupStatus.UNSPECIFIED:
        return Settlement.failed(operation_id, found.error)
    recorded = Settlement.from_lookup(answer)
    if verdict.action is Action.ESCALATE:
        # The note is what an operator reads on GetOperation: say why nothing more will happen.
        return Settlement(
            recorded.operation_id,
            recorded.status,
            recorded.receipt,
            recorded.consistency,
            recorded.observed_at,
            error=f"escalated: {verdict.reason}",
        )
    return recorded
