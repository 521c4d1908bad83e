"""The receiver's refusals. Each maps to one status in ``grpc_api.STATUS_TABLE``.

    DomainError                      decisionflow_server.foundation.errors: every refusal on the wire
    ├── InvalidRequest               INVALID_ARGUMENT, field violations; nothing was written
    ├── ReceiverError                base of the receiver's own refusals
    │   ├── IdempotencyKeyReused     FAILED_PRECONDITION; the stored effect is unchanged; never retry
    │   └── KeyRetentionExceeded     FAILED_PRECONDITION; the key may have been pruned; nothing written
    └── Unavailable                  UNAVAILABLE; the database cannot be reached; retry with the same key
        └── ReplyLost                UNAVAILABLE (failpoint): the effect committed, the reply was withheld

``InvalidRequest`` and ``Unavailable`` are the shared classes of ``decisionflow_server.foundation.errors``. The status
of each is its reason's, as ``decisionflow.reasons`` declares it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from decisionflow import reasons
from decisionflow_server.foundation.errors import DomainError, FieldViolation, InvalidRequest, Unavailable

__all__ = [
    "DomainError",
    "FieldViolation",
    "IdempotencyKeyReused",
    "InvalidRequest",
    "KeyRetentionExceeded",
    "ReceiverError",
    "ReplyLost",
    "Unavailable",
]


class ReceiverError(DomainError):
    """Base of the receiver's own refusals."""


class IdempotencyKeyReused(ReceiverError):
    """An effect exists under this operation id with another payload digest; it stays as it was."""

    reason = reasons.IDEMPOTENCY_KEY_REUSED

    def __init__(self, operation_id: str) -> None:
        super().__init__(
            f"operation {operation_id} was already applied with another payload",
            metadata={reasons.OPERATION_ID: operation_id},
        )
        self.operation_id = operation_id


class KeyRetentionExceeded(ReceiverError):
    """operation_id's key is absent and its first attempt beyond the retention (maybe pruned); nothing written."""

    reason = reasons.KEY_RETENTION_EXCEEDED

    def __init__(self, operation_id: str, first_attempted_at: datetime, key_retention: timedelta) -> None:
        super().__init__(
            f"operation {operation_id} was first attempted at {first_attempted_at.isoformat()}, beyond the key "
            f"retention of {key_retention.total_seconds():g} s; its key may have been pruned, so it is not applied",
            metadata={
                reasons.OPERATION_ID: operation_id,
                reasons.FIRST_ATTEMPTED_AT: first_attempted_at.isoformat(),
                reasons.KEY_RETENTION: f"{key_retention.total_seconds():g}s",
            },
        )
        self.operation_id = operation_id
        self.first_attempted_at = first_attempted_at
        self.key_retention = key_retention


class ReplyLost(Unavailable):
    """The effect for operation_id committed but the reply was withheld (failpoint); a lookup shows it."""

    reason = reasons.REPLY_LOST

    def __init__(self, operation_id: str) -> None:
        super().__init__(
            f"operation {operation_id}: committed, reply lost (failpoint)",
            metadata={reasons.OPERATION_ID: operation_id},
        )
        self.operation_id = operation_id
