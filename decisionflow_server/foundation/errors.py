"""The domain error base shared by every service: refusals with a reason, metadata and field violations.

    DomainError                      every refusal a service reports on the wire
    ├── InvalidRequest               bad fields (INVALID_ARGUMENT), with field violations
    ├── Unavailable                  a dependency is down; retry with the same key (UNAVAILABLE)
    ├── KeyRetentionExceeded         an Apply beyond the receiver's key retention (FAILED_PRECONDITION):
    │                                the receiver refuses it, the orchestrator passes it on; escalate
    └── (each service's errors.py)   the service's own refusals

No grpc here: stores, validation and use cases raise these; ``decisionflow_server.runtime.rpc_errors`` turns
them into a rich gRPC status at the server's edge. Each reason is declared in
``decisionflow.reasons`` with its status and metadata keys: a refusal whose metadata names a key
its reason does not declare is a programming error, raised where the refusal is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta

from decisionflow import reasons
from decisionflow.reasons import FieldViolation

__all__ = ["DomainError", "FieldViolation", "InvalidRequest", "KeyRetentionExceeded", "Unavailable", "duration_text"]


def duration_text(delay: timedelta) -> str:
    """Return delay as google.protobuf.Duration's JSON spells it, to the millisecond ("0.250s"): the
    ErrorInfo ``retry_after`` beside the RetryInfo that carries the same delay."""
    return f"{delay.total_seconds():.3f}s"


class DomainError(Exception):
    """A refusal with a machine-readable reason and metadata (google.rpc.ErrorInfo); with retry_after,
    also when the same request may succeed again (google.rpc.RetryInfo)."""

    reason: str = ""

    def __init__(
        self, message: str, *, metadata: Mapping[str, str] | None = None, retry_after: timedelta | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})
        self.retry_after = retry_after
        declared = reasons.REFUSALS.get(self.reason)
        if declared is not None and not self.metadata.keys() <= set(declared.metadata):
            undeclared = sorted(self.metadata.keys() - set(declared.metadata))
            raise ValueError(f"{type(self).__name__}: {self.reason} declares no metadata keys {undeclared}")


class InvalidRequest(DomainError):
    """The request is malformed; nothing was written."""

    reason = reasons.INVALID_ARGUMENT

    def __init__(self, violations: Sequence[FieldViolation], *, reason: str | None = None) -> None:
        summary = "; ".join(f"{v.field}: {v.description}" for v in violations[:5])
        super().__init__(f"invalid request: {summary}")
        self.violations = list(violations)
        if reason is not None:
            self.reason = reason


class Unavailable(DomainError):
    """A dependency (database, shutdown in progress) is unavailable; retry with the same key."""

    reason = reasons.UNAVAILABLE


class KeyRetentionExceeded(DomainError):
    """operation_id's key is absent at the receiver and its first attempt beyond the key retention, so the
    key may have been pruned: nothing was written; the operation stays unknown, to escalate, never re-drive.

    The receiver raises it for an Apply; the orchestrator for a re-drive the receiver refused so. Both
    values are as the wire carries them: an RFC 3339 time and a duration such as "86400s".
    """

    reason = reasons.KEY_RETENTION_EXCEEDED

    def __init__(self, operation_id: str, first_attempted_at: str, key_retention: str) -> None:
        super().__init__(
            f"operation {operation_id} was first attempted at {first_attempted_at}, beyond the receiver's key "
            f"retention of {key_retention}; its key may have been pruned, so it is not applied: escalate it, "
            "never re-drive it",
            metadata={
                reasons.OPERATION_ID: operation_id,
                reasons.FIRST_ATTEMPTED_AT: first_attempted_at,
                reasons.KEY_RETENTION: key_retention,
            },
        )
        self.operation_id = operation_id
        self.first_attempted_at = first_attempted_at
        self.key_retention = key_retention
