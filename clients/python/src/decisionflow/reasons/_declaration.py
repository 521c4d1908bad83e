"""The declaration of every refusal: the metadata keys, the reasons, each reason's status, definiteness and
keys (``REFUSALS``), what a status means without a declared reason (``STATUS_RULES``), and the field
violation a BadRequest carries. Read through ``decisionflow.reasons``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Refusal:
    """One reason a service refuses a call, as every server and client must treat it."""

    reason: str
    """The ErrorInfo reason, upper case."""
    status: str
    """The gRPC status code it travels with, by name (``FAILED_PRECONDITION``)."""
    definite: bool
    """True when the request certainly had no effect, so repeating it unchanged cannot help."""
    metadata: tuple[str, ...]
    """The ErrorInfo metadata keys it may carry; a refusal leaves out a key that does not apply."""


@dataclass(frozen=True, slots=True)
class StatusRule:
    """What a status means when it comes without a reason declared with it."""

    status: str
    """The gRPC status code, by name."""
    raised_as: str
    """The Python client's error class for it (in ``decisionflow.client.errors``)."""
    definite: bool
    """True when a refusal with this status certainly had no effect."""
    caller_dependent: bool = False
    """True when it depends on who calls or on state, not on the request's bytes: after an earlier
    indeterminate attempt of the same call it proves nothing about that attempt."""


_MEANINGS: dict[str, str] = {}


def _key(name: str, meaning: str) -> str:
    """Declare an ErrorInfo metadata key and what it holds; return the key."""
    _MEANINGS[name] = meaning
    return name


# ErrorInfo metadata keys. An operation is always named by OPERATION_ID; enum values are spelled as the
# proto spells them (DECISION_APPROVE, OPERATION_STATE_COMMITTED).
OPERATION_ID = _key("operation_id", "the operation (for `NOT_FOUND`: an operation or pending review); never `id`")
CASE_ID = _key("case_id", "the case (for `NOT_FOUND`: a case)")
CURRENT_OPERATION_ID = _key("current_operation_id", "the case's current proposal")
RECORDED_DECISION = _key("recorded_decision", "the decision on record: `DECISION_APPROVE` or `DECISION_DECLINE`")
STATE = _key("state", "the operation's state, as the proto spells it (`OPERATION_STATE_COMMITTED`)")
RECORDED = _key("recorded", "the workflow (name@version) the pending review was recorded under")
RUNNING = _key("running", "the workflow (name@version) the server runs")
CHECKPOINT_ID = _key("checkpoint_id", "the checkpoint that was refused")
PRINCIPAL = _key("principal", "the authenticated principal that was refused")
FIRST_ATTEMPTED_AT = _key("first_attempted_at", "the first attempt the refusal was judged by (RFC 3339)")
KEY_RETENTION = _key("key_retention", "the receiver's key retention (for example `86400s`)")
RPC = _key("rpc", "the method called (`/decisionflow.v1.ReviewService/Approve`)")
REQUIRED_ROLES = _key("required_roles", "the roles the method allows, comma-separated (for a method in the policy)")
# A budget refusal, or a database that cannot answer, says when to come back as a duration in the form
# google.protobuf.Duration's JSON takes ("0.250s"), beside the RetryInfo detail that carries the same delay.
RETRY_AFTER = _key(
    "retry_after",
    "when to send the same request again (a budget refills, a database may answer again), as a duration "
    "(`0.250s`), as `RetryInfo`",
)
CONTENT_BYTES = _key("content_bytes", "the refused request's bytes of proposal text (body, evidence, policy)")
OPEN_REVIEW_LIMIT = _key("open_review_limit", "the most undecided proposals one author may have in the inbox")
# The audit log's sizes and indices, in decimal.
TREE_SIZE = _key("tree_size", "the audit log's tree size the request asked for (or the latest checkpoint's)")
LEAF_INDEX = _key("leaf_index", "the audit log leaf index the request asked for")
CHECKPOINT_SIZE = _key("checkpoint_size", "the size of the audit log's latest signed checkpoint")
# Why a review's rule does not count a vote (decisionflow.review_rules.VoteRefusal, lower case).
VOTE_REFUSAL = _key(
    "vote_refusal",
    "why the review's rule does not count the vote: `author`, `already_voted`, `counted_in_earlier_stage` or "
    "`not_eligible`",
)
# The event feed's position and budget (WatchEvents), in decimal.
NEXT_INDEX = _key("next_index", "the audit log index a watch resumes from (`start_index` of the next WatchEvents)")
STREAM_LIMIT = _key("stream_limit", "the most WatchEvents streams one principal may hold open at once")
METADATA_KEY_MEANINGS: Mapping[str, str] = MappingProxyType(_MEANINGS)

# The reasons, in the order the guides list them.
INVALID_ARGUMENT = "INVALID_ARGUMENT"
DECISION_REQUIRED = "DECISION_REQUIRED"
NOT_FOUND = "NOT_FOUND"
STALE_PROPOSAL = "STALE_PROPOSAL"
CASE_HAS_OPEN_PROPOSAL = "CASE_HAS_OPEN_PROPOSAL"
DECISION_CONFLICT = "DECISION_CONFLICT"
NOT_REDRIVABLE = "NOT_REDRIVABLE"
WORKFLOW_VERSION_MISMATCH = "WORKFLOW_VERSION_MISMATCH"
IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
KEY_RETENTION_EXCEEDED = "KEY_RETENTION_EXCEEDED"
CHECKPOINT_INTEGRITY = "CHECKPOINT_INTEGRITY"
CHECKPOINT_SAVE_FAILED = "CHECKPOINT_SAVE_FAILED"
UNAVAILABLE = "UNAVAILABLE"
REPLY_LOST = "REPLY_LOST"
WORKFLOW_PROTOCOL = "WORKFLOW_PROTOCOL"
UNAUTHENTICATED = "UNAUTHENTICATED"
PERMISSION_DENIED = "PERMISSION_DENIED"
FOUR_EYES = "FOUR_EYES"
CALL_RATE_EXCEEDED = "CALL_RATE_EXCEEDED"
CONTENT_BUDGET_EXCEEDED = "CONTENT_BUDGET_EXCEEDED"
TOO_MANY_OPEN_REVIEWS = "TOO_MANY_OPEN_REVIEWS"
REVIEW_EXPIRED = "REVIEW_EXPIRED"
NOT_ELIGIBLE_TO_DECIDE = "NOT_ELIGIBLE_TO_DECIDE"
BEYOND_CHECKPOINT = "BEYOND_CHECKPOINT"
WATCH_FELL_BEHIND = "WATCH_FELL_BEHIND"
TOO_MANY_STREAMS = "TOO_MANY_STREAMS"


def _declared(*refusals: Refusal) -> Mapping[str, Refusal]:
    """Return refusals by reason; a reason declared twice, without a constant of its name, or with a
    metadata key not declared above fails the import."""
    by_reason: dict[str, Refusal] = {}
    for declared in refusals:
        if declared.reason in by_reason or globals().get(declared.reason) != declared.reason:
            raise ValueError(f"{declared.reason!r} is declared twice, or without a constant of its own name")
        if undeclared := [key for key in declared.metadata if key not in _MEANINGS]:
            raise ValueError(f"{declared.reason} names metadata keys that are not declared: {undeclared}")
        by_reason[declared.reason] = declared
    return MappingProxyType(by_reason)


# Every refusal: its reason, the status it travels with, whether it is definite (the request certainly
# had no effect) and the ErrorInfo metadata keys it may carry. The Python client raises it as the class
# that names it (``reason=``), else as its status's class (STATUS_RULES).
REFUSALS: Mapping[str, Refusal] = _declared(
    Refusal(INVALID_ARGUMENT, "INVALID_ARGUMENT", True, ()),
    Refusal(DECISION_REQUIRED, "INVALID_ARGUMENT", True, ()),
    Refusal(NOT_FOUND, "NOT_FOUND", True, (OPERATION_ID, CASE_ID, TREE_SIZE)),
    Refusal(STALE_PROPOSAL, "FAILED_PRECONDITION", True, (OPERATION_ID, CURRENT_OPERATION_ID)),
    Refusal(CASE_HAS_OPEN_PROPOSAL, "FAILED_PRECONDITION", True, (CASE_ID, CURRENT_OPERATION_ID)),
    Refusal(DECISION_CONFLICT, "ALREADY_EXISTS", True, (OPERATION_ID, RECORDED_DECISION)),
    Refusal(NOT_REDRIVABLE, "FAILED_PRECONDITION", True, (OPERATION_ID, STATE)),
    Refusal(WORKFLOW_VERSION_MISMATCH, "FAILED_PRECONDITION", True, (OPERATION_ID, RECORDED, RUNNING)),
    Refusal(IDEMPOTENCY_KEY_REUSED, "FAILED_PRECONDITION", True, (OPERATION_ID,)),
    Refusal(KEY_RETENTION_EXCEEDED, "FAILED_PRECONDITION", True, (OPERATION_ID, FIRST_ATTEMPTED_AT, KEY_RETENTION)),
    Refusal(CHECKPOINT_INTEGRITY, "DATA_LOSS", True, (OPERATION_ID, CHECKPOINT_ID)),
    Refusal(CHECKPOINT_SAVE_FAILED, "UNAVAILABLE", True, ()),
    Refusal(UNAVAILABLE, "UNAVAILABLE", False, (RETRY_AFTER,)),
    Refusal(REPLY_LOST, "UNAVAILABLE", False, (OPERATION_ID,)),
    Refusal(WORKFLOW_PROTOCOL, "INTERNAL", False, ()),
    Refusal(UNAUTHENTICATED, "UNAUTHENTICATED", True, ()),
    Refusal(PERMISSION_DENIED, "PERMISSION_DENIED", True, (RPC, PRINCIPAL, REQUIRED_ROLES)),
    Refusal(FOUR_EYES, "PERMISSION_DENIED", True, (PRINCIPAL,)),
    Refusal(CALL_RATE_EXCEEDED, "RESOURCE_EXHAUSTED", True, (PRINCIPAL, RETRY_AFTER)),
    Refusal(CONTENT_BUDGET_EXCEEDED, "RESOURCE_EXHAUSTED", True, (PRINCIPAL, RETRY_AFTER, CONTENT_BYTES)),
    Refusal(TOO_MANY_OPEN_REVIEWS, "FAILED_PRECONDITION", True, (PRINCIPAL, OPEN_REVIEW_LIMIT)),
    Refusal(REVIEW_EXPIRED, "FAILED_PRECONDITION", True, (OPERATION_ID,)),
    Refusal(NOT_ELIGIBLE_TO_DECIDE, "PERMISSION_DENIED", True, (OPERATION_ID, PRINCIPAL, VOTE_REFUSAL)),
    Refusal(
        BEYOND_CHECKPOINT, "FAILED_PRECONDITION", True, (CHECKPOINT_SIZE, TREE_SIZE, LEAF_INDEX, OPERATION_ID, CASE_ID)
    ),
    Refusal(WATCH_FELL_BEHIND, "UNAVAILABLE", False, (NEXT_INDEX,)),
    Refusal(TOO_MANY_STREAMS, "RESOURCE_EXHAUSTED", True, (PRINCIPAL, STREAM_LIMIT)),
)

# A status that comes without one of the reasons above: a call refused before it reached a handler
# (an unknown method, a message over the limit, an expired deadline), a reason a newer server added,
# or a failure of the transport. Any status not listed here is a ServerError and indeterminate.
STATUS_RULES: tuple[StatusRule, ...] = (
    StatusRule("INVALID_ARGUMENT", "InvalidRequest", definite=True),
    StatusRule("NOT_FOUND", "NotFound", definite=True, caller_dependent=True),
    StatusRule("UNAUTHENTICATED", "Unauthenticated", definite=True, caller_dependent=True),
    StatusRule("PERMISSION_DENIED", "PermissionDenied", definite=True, caller_dependent=True),
    StatusRule("FAILED_PRECONDITION", "PreconditionFailed", definite=True),
    StatusRule("ALREADY_EXISTS", "ServerError", definite=True),
    StatusRule("UNAVAILABLE", "Unavailable", definite=False),
    # Overload, or a budget whose reason this client does not know: retried with back-off.
    StatusRule("RESOURCE_EXHAUSTED", "Unavailable", definite=False, caller_dependent=True),
    StatusRule("DEADLINE_EXCEEDED", "DeadlineExceeded", definite=False),
)
OTHER_STATUS_RAISED_AS = "ServerError"

# The metadata keys each reason's ErrorInfo may carry (REFUSALS says the same; kept for callers of this name).
METADATA_KEYS: Mapping[str, tuple[str, ...]] = {declared.reason: declared.metadata for declared in REFUSALS.values()}


def refusal(reason: str) -> Refusal:
    """Return the declaration of reason; a reason nobody declared is a LookupError naming it."""
    try:
        return REFUSALS[reason]
    except KeyError:
        raise LookupError(f"reason {reason!r} is not declared in decisionflow.reasons") from None


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field: its path (for example ``evidence[2].source_id``) and why."""

    field: str
    description: str
