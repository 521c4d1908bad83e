"""The receiver's refusals. Each maps to one status in ``grpc_api.STATUS_TABLE``.

    DomainError                      decisionflow_server.foundation.errors: every refusal on the wire
    ├── InvalidRequest               INVALID_ARGUMENT, field violations; nothing was written
    ├── ReceiverError                base of the receiver's own refusals
    │   └── IdempotencyKeyReused     FAILED_PRECONDITION; the stored effect is unchanged; never retry
    ├── KeyRetentionExceeded         FAILED_PRECONDITION; the key may have been pruned; nothing written
    └── Unavailable                  UNAVAILABLE; the database cannot be reached; retry with the same key
        └── ReplyLost                UNAVAILABLE (failpoint): the effect committed, the reply was withheld

``InvalidRequest``, ``KeyRetentionExceeded`` and ``Unavailable`` are the shared classes of
``decisionflow_server.foundation.errors``. The status
of each is its reason's, as ``decisionflow.reasons`` declares it.
"""

from __future__ import annotations

from decisionflow import reasons
from decisionflow_server.foundation.errors import (
    DomainError,
    FieldViolation,
    InvalidRequest,
    KeyRetentionExceeded,
    Unavailable,
)

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


class ReplyLost(Unavailable):
    """The effect for operation_id committed but the reply was withheld (failpoint); a lookup shows it."""

    reason = reasons.REPLY_LOST

    def __init__(self, operation_id: str) -> None:
        super().__init__(
            f"operation {operation_id}: committed, reply lost (failpoint)",
            metadata={reasons.OPERATION_ID: operation_id},
        )
        self.operation_id = operation_id
