"""Orchestrator refusals. Each maps to one status in grpc_api.STATUS_TABLE.

DomainError (decisionflow.errors)
├── InvalidRequest             bad fields, decision omitted          INVALID_ARGUMENT
├── Unavailable                database down, shutting down          UNAVAILABLE
└── OrchestratorError
    ├── NotFound               unknown case or operation             NOT_FOUND
    ├── StaleProposal          operation is not the case's current   FAILED_PRECONDITION
    ├── DecisionConflict       another decision is recorded          ALREADY_EXISTS
    ├── NotRedrivable          operation is not APPROVED/UNKNOWN      FAILED_PRECONDITION
    ├── WorkflowVersionMismatch checkpoint from another graph        FAILED_PRECONDITION
    ├── CheckpointIntegrity    checkpoint failed its HMAC check      DATA_LOSS
    ├── CheckpointSaveFailed   a checkpoint could not be stored      UNAVAILABLE
    └── WorkflowProtocolError  the workflow broke an invariant       INTERNAL
"""

from __future__ import annotations

from decisionflow import reasons
from decisionflow.errors import DomainError


class OrchestratorError(DomainError):
    """Base of the orchestrator's own refusals."""


class NotFound(OrchestratorError):
    """No proposal, case or operation with that id."""

    reason = reasons.NOT_FOUND

    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} {ident} not found", metadata={"id": ident})
        self.ident = ident


class StaleProposal(OrchestratorError):
    """The operation the caller saw is no longer the case's current proposal."""

    reason = reasons.STALE_PROPOSAL

    def __init__(self, operation_id: str, current_operation_id: str) -> None:
        super().__init__(
            f"operation {operation_id} is stale; the case's current proposal is {current_operation_id}",
            metadata={reasons.OPERATION_ID: operation_id, reasons.CURRENT_OPERATION_ID: current_operation_id},
        )
        self.operation_id = operation_id
        self.current_operation_id = current_operation_id


class DecisionConflict(OrchestratorError):
    """A different decision is already recorded for the operation; decisions are immutable."""

    reason = reasons.DECISION_CONFLICT

    def __init__(self, operation_id: str, recorded: str) -> None:
        super().__init__(
            f"operation {operation_id} was already decided: {recorded}",
            metadata={reasons.OPERATION_ID: operation_id, reasons.RECORDED_DECISION: recorded},
        )
        self.operation_id = operation_id
        self.recorded = recorded


class NotRedrivable(OrchestratorError):
    """Only an APPROVED or UNKNOWN operation can be re-driven."""

    reason = reasons.NOT_REDRIVABLE

    def __init__(self, operation_id: str, state: str) -> None:
        super().__init__(
            f"operation {operation_id} is {state}; only approved or unknown operations are re-driven",
            metadata={reasons.OPERATION_ID: operation_id, "state": state},
        )


class WorkflowVersionMismatch(OrchestratorError):
    """The pending review was checkpointed by a workflow graph this process does not run."""

    reason = reasons.WORKFLOW_VERSION_MISMATCH

    def __init__(self, operation_id: str, recorded: str, running: str) -> None:
        super().__init__(
            f"pending review of {operation_id} was recorded under workflow {recorded}; this process runs "
            f"{running}; re-open it with `decisionflow-orchestrator reopen-reviews`",
            metadata={reasons.OPERATION_ID: operation_id, "recorded": recorded, "running": running},
        )


class CheckpointIntegrity(OrchestratorError):
    """A stored checkpoint failed its HMAC check (tampered or foreign); it was not decoded."""

    reason = reasons.CHECKPOINT_INTEGRITY

    def __init__(self, checkpoint_id: str, why: str) -> None:
        super().__init__(f"checkpoint {checkpoint_id} refused: {why}", metadata={"checkpoint_id": checkpoint_id})


class CheckpointSaveFailed(OrchestratorError):
    """A checkpoint could not be stored, so the request was not recorded."""

    reason = reasons.CHECKPOINT_SAVE_FAILED


class WorkflowProtocolError(OrchestratorError):
    """The workflow did not behave as the service requires (for example a request for another operation)."""

    reason = reasons.WORKFLOW_PROTOCOL
