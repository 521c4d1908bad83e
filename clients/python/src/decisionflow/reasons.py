"""The ErrorInfo reasons and metadata keys every service and client shares, and the field violation
a BadRequest carries (no grpc here).

docs/errors.md lists each reason with its status code, whether a retry can help, and the
metadata keys it carries.
"""

from __future__ import annotations

from dataclasses import dataclass

DECISION_REQUIRED = "DECISION_REQUIRED"
INVALID_ARGUMENT = "INVALID_ARGUMENT"
STALE_PROPOSAL = "STALE_PROPOSAL"
CASE_HAS_OPEN_PROPOSAL = "CASE_HAS_OPEN_PROPOSAL"
DECISION_CONFLICT = "DECISION_CONFLICT"
IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
NOT_FOUND = "NOT_FOUND"
NOT_REDRIVABLE = "NOT_REDRIVABLE"
UNAUTHENTICATED = "UNAUTHENTICATED"
PERMISSION_DENIED = "PERMISSION_DENIED"
FOUR_EYES = "FOUR_EYES"
UNAVAILABLE = "UNAVAILABLE"
WORKFLOW_VERSION_MISMATCH = "WORKFLOW_VERSION_MISMATCH"
WORKFLOW_PROTOCOL = "WORKFLOW_PROTOCOL"
CHECKPOINT_INTEGRITY = "CHECKPOINT_INTEGRITY"
CHECKPOINT_SAVE_FAILED = "CHECKPOINT_SAVE_FAILED"
REPLY_LOST = "REPLY_LOST"
KEY_RETENTION_EXCEEDED = "KEY_RETENTION_EXCEEDED"

# ErrorInfo metadata keys. An operation is always named by OPERATION_ID; enum values are spelled
# as the proto spells them (DECISION_APPROVE, OPERATION_STATE_COMMITTED).
OPERATION_ID = "operation_id"
CASE_ID = "case_id"
CURRENT_OPERATION_ID = "current_operation_id"
RECORDED_DECISION = "recorded_decision"
STATE = "state"
RECORDED = "recorded"
RUNNING = "running"
CHECKPOINT_ID = "checkpoint_id"
PRINCIPAL = "principal"
FIRST_ATTEMPTED_AT = "first_attempted_at"
KEY_RETENTION = "key_retention"


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field: its path (for example ``evidence[2].source_id``) and why."""

    field: str
    description: str
