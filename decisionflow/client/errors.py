"""Typed errors raised by the decisionflow clients, and the one place gRPC failures become them.

    DecisionflowError                  base: code, reason, message, metadata, violations, definite
    ├── InvalidRequest                 INVALID_ARGUMENT; field violations; nothing was written
    ├── NotFound                       NOT_FOUND; unknown case or operation
    ├── Unauthenticated                UNAUTHENTICATED; no or bad credentials
    ├── PermissionDenied               PERMISSION_DENIED; role missing (or four-eyes rule)
    ├── PreconditionFailed             FAILED_PRECONDITION; any reason, including those below
    │   ├── StaleProposal              STALE_PROPOSAL; current_operation_id
    │   ├── IdempotencyKeyReused       IDEMPOTENCY_KEY_REUSED; operation_id
    │   └── WorkflowVersionMismatch    WORKFLOW_VERSION_MISMATCH
    ├── DecisionConflict               ALREADY_EXISTS, DECISION_CONFLICT; recorded_decision
    ├── CheckpointIntegrity            DATA_LOSS, CHECKPOINT_INTEGRITY
    ├── Unavailable                    UNAVAILABLE or RESOURCE_EXHAUSTED, after the retries ran out
    ├── DeadlineExceeded               DEADLINE_EXCEEDED, after the retries ran out
    └── ServerError                    anything else (INTERNAL, UNKNOWN, CANCELLED, ...)

``definite`` is True only when the request certainly had no effect: a refusal with
INVALID_ARGUMENT, FAILED_PRECONDITION, ALREADY_EXISTS, PERMISSION_DENIED, UNAUTHENTICATED or
NOT_FOUND. Everything else is indeterminate: the server may have acted before the reply was
lost, so the outcome must be settled by a lookup or a retry with the same operation id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import grpc

from decisionflow import reasons
from decisionflow.client.views import Decision
from decisionflow.errors import FieldViolation
from decisionflow.rpc_errors import error_info

DEFINITE_CODES: frozenset[grpc.StatusCode] = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.NOT_FOUND,
    }
)
# Refusals that depend on who calls or on state, not on the request's bytes. After an
# earlier indeterminate attempt of the same call they prove nothing about that attempt.
_CALLER_DEPENDENT_CODES: frozenset[grpc.StatusCode] = frozenset(
    {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.NOT_FOUND}
)


class DecisionflowError(Exception):
    """A call failed; the attributes carry the status, the ErrorInfo and whether it is definite."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[FieldViolation] = (),
        attempts: int = 1,
        definite: bool | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})
        self.violations: tuple[FieldViolation, ...] = tuple(violations)
        self.attempts = attempts
        self.definite: bool = code in DEFINITE_CODES if definite is None else definite


class InvalidRequest(DecisionflowError):
    """The request was malformed (violations name the fields); nothing was written."""


class NotFound(DecisionflowError):
    """The case or operation does not exist."""


class Unauthenticated(DecisionflowError):
    """The call carried no valid credentials."""


class PermissionDenied(DecisionflowError):
    """The authenticated principal lacks the role (reason FOUR_EYES: it authored the proposal)."""


class PreconditionFailed(DecisionflowError):
    """The system is not in a state that allows the call; retrying the same request will not help."""


class StaleProposal(PreconditionFailed):
    """The operation is no longer the case's current proposal; current_operation_id names the current one."""

    @property
    def current_operation_id(self) -> str:
        """The case's current operation id, as reported by the server ("" when not reported)."""
        return self.metadata.get(reasons.CURRENT_OPERATION_ID, "")


class IdempotencyKeyReused(PreconditionFailed):
    """An effect exists under this operation id with another payload; it was left unchanged."""

    @property
    def operation_id(self) -> str:
        """The operation id (idempotency key) that was reused ("" when not reported)."""
        return self.metadata.get(reasons.OPERATION_ID, "")


class WorkflowVersionMismatch(PreconditionFailed):
    """The pending review was checkpointed by a workflow graph the server no longer runs."""


class DecisionConflict(DecisionflowError):
    """Another decision is already recorded for the operation; decisions are immutable."""

    @property
    def recorded_decision(self) -> Decision:
        """The decision on record (UNSPECIFIED when the server did not name it)."""
        return Decision.parse(self.metadata.get(reasons.RECORDED_DECISION, ""))


class CheckpointIntegrity(DecisionflowError):
    """The stored checkpoint failed its integrity check and was refused, never decoded."""


class Unavailable(DecisionflowError):
    """The server stayed unavailable (or overloaded) through every retry; the outcome is not known."""


class DeadlineExceeded(DecisionflowError):
    """The call's deadline passed; the server may still have acted."""


class ServerError(DecisionflowError):
    """Any other failure (internal error, cancelled call, unexpected status)."""


_BY_REASON: Mapping[tuple[grpc.StatusCode, str], type[DecisionflowError]] = {
    (grpc.StatusCode.FAILED_PRECONDITION, reasons.STALE_PROPOSAL): StaleProposal,
    (grpc.StatusCode.FAILED_PRECONDITION, reasons.IDEMPOTENCY_KEY_REUSED): IdempotencyKeyReused,
    (grpc.StatusCode.FAILED_PRECONDITION, reasons.WORKFLOW_VERSION_MISMATCH): WorkflowVersionMismatch,
    (grpc.StatusCode.ALREADY_EXISTS, reasons.DECISION_CONFLICT): DecisionConflict,
    (grpc.StatusCode.DATA_LOSS, reasons.CHECKPOINT_INTEGRITY): CheckpointIntegrity,
}

_BY_CODE: Mapping[grpc.StatusCode, type[DecisionflowError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.FAILED_PRECONDITION: PreconditionFailed,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def map_rpc_error(err: grpc.RpcError, *, attempts: int = 1) -> DecisionflowError:
    """Return the typed error for a failed call; attempts is how many times the call was sent.

    A caller-dependent refusal (PERMISSION_DENIED, UNAUTHENTICATED, NOT_FOUND) after an
    earlier indeterminate attempt is itself indeterminate: that attempt may have acted.
    """
    code_method = getattr(err, "code", None)
    code = code_method() if callable(code_method) else grpc.StatusCode.UNKNOWN
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details_method = getattr(err, "details", None)
    message = (details_method() if callable(details_method) else None) or ""
    try:
        reason, metadata, violations = error_info(err)
    except (AttributeError, ValueError):
        # No trailing metadata, or a status detail that contradicts the call's code:
        # the code alone still classifies the failure.
        reason, metadata, violations = "", {}, []
    cls = _BY_REASON.get((code, reason)) or _BY_CODE.get(code, ServerError)
    definite = code in DEFINITE_CODES and not (attempts > 1 and code in _CALLER_DEPENDENT_CODES)
    return cls(
        code,
        message,
        reason=reason,
        metadata=metadata,
        violations=violations,
        attempts=attempts,
        definite=definite,
    )
