"""The ErrorInfo reasons and metadata keys every service and client shares, and the field violation
a BadRequest carries (no grpc here).

docs/errors.md lists each reason with its status code, whether a retry can help, and the
metadata keys it carries.
"""

from __future__ import annotations

from collections.abc import Mapping
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
CALL_RATE_EXCEEDED = "CALL_RATE_EXCEEDED"
CONTENT_BUDGET_EXCEEDED = "CONTENT_BUDGET_EXCEEDED"
TOO_MANY_OPEN_REVIEWS = "TOO_MANY_OPEN_REVIEWS"
REVIEW_EXPIRED = "REVIEW_EXPIRED"
BEYOND_CHECKPOINT = "BEYOND_CHECKPOINT"

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
RPC = "rpc"
REQUIRED_ROLES = "required_roles"
# A budget refusal says when to come back as a duration in the form google.protobuf.Duration's JSON
# takes ("0.250s"), beside the RetryInfo detail that carries the same delay.
RETRY_AFTER = "retry_after"
CONTENT_BYTES = "content_bytes"
OPEN_REVIEW_LIMIT = "open_review_limit"
# The audit log's sizes and indices, in decimal: the tree size a request asked for (or the latest
# checkpoint's, when it asked for none), a leaf's index, and the latest signed checkpoint's size.
TREE_SIZE = "tree_size"
LEAF_INDEX = "leaf_index"
CHECKPOINT_SIZE = "checkpoint_size"

# The metadata keys each reason's ErrorInfo may carry. A refusal carries a subset when a key does
# not apply: NOT_FOUND names the operation, the case or the audit log's tree size; PERMISSION_DENIED
# names the principal and the roles only when the method is in the policy; BEYOND_CHECKPOINT names
# what was asked. docs/clients.md lists the same keys.
METADATA_KEYS: Mapping[str, tuple[str, ...]] = {
    INVALID_ARGUMENT: (),
    DECISION_REQUIRED: (),
    NOT_FOUND: (OPERATION_ID, CASE_ID, TREE_SIZE),
    STALE_PROPOSAL: (OPERATION_ID, CURRENT_OPERATION_ID),
    CASE_HAS_OPEN_PROPOSAL: (CASE_ID, CURRENT_OPERATION_ID),
    DECISION_CONFLICT: (OPERATION_ID, RECORDED_DECISION),
    NOT_REDRIVABLE: (OPERATION_ID, STATE),
    WORKFLOW_VERSION_MISMATCH: (OPERATION_ID, RECORDED, RUNNING),
    IDEMPOTENCY_KEY_REUSED: (OPERATION_ID,),
    KEY_RETENTION_EXCEEDED: (OPERATION_ID, FIRST_ATTEMPTED_AT, KEY_RETENTION),
    CHECKPOINT_INTEGRITY: (OPERATION_ID, CHECKPOINT_ID),
    CHECKPOINT_SAVE_FAILED: (),
    UNAVAILABLE: (),
    REPLY_LOST: (OPERATION_ID,),
    WORKFLOW_PROTOCOL: (),
    UNAUTHENTICATED: (),
    PERMISSION_DENIED: (RPC, PRINCIPAL, REQUIRED_ROLES),
    FOUR_EYES: (PRINCIPAL,),
    CALL_RATE_EXCEEDED: (PRINCIPAL, RETRY_AFTER),
    CONTENT_BUDGET_EXCEEDED: (PRINCIPAL, RETRY_AFTER, CONTENT_BYTES),
    TOO_MANY_OPEN_REVIEWS: (PRINCIPAL, OPEN_REVIEW_LIMIT),
    REVIEW_EXPIRED: (OPERATION_ID,),
    BEYOND_CHECKPOINT: (CHECKPOINT_SIZE, TREE_SIZE, LEAF_INDEX, OPERATION_ID, CASE_ID),
}


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field: its path (for example ``evidence[2].source_id``) and why."""

    field: str
    description: str
