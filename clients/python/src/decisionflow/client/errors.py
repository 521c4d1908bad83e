"""Typed errors raised by the decisionflow clients, and the one place gRPC failures become them.

    DecisionflowError                  base: code, reason, message, metadata, violations, definite, retry_after
    ├── InvalidRequest                 INVALID_ARGUMENT; field violations; nothing was written
    │   └── DecisionRequired           DECISION_REQUIRED: the decision was omitted
    ├── NotFound                       NOT_FOUND; operation_id, case_id, or an audit log's tree_size
    ├── Unauthenticated                UNAUTHENTICATED; no or bad credentials
    ├── PermissionDenied               PERMISSION_DENIED; role missing
    │   ├── FourEyes                   FOUR_EYES: the author cannot decide
    │   └── NotEligibleToDecide        NOT_ELIGIBLE_TO_DECIDE: the review's rule does not count the vote
    ├── PreconditionFailed             FAILED_PRECONDITION; any reason, including those below
    │   ├── StaleProposal              STALE_PROPOSAL
    │   ├── CaseHasOpenProposal        CASE_HAS_OPEN_PROPOSAL
    │   ├── NotRedrivable              NOT_REDRIVABLE (already settled)
    │   ├── IdempotencyKeyReused       IDEMPOTENCY_KEY_REUSED
    │   ├── KeyRetentionExceeded       KEY_RETENTION_EXCEEDED
    │   ├── WorkflowVersionMismatch    WORKFLOW_VERSION_MISMATCH
    │   ├── TooManyOpenReviews         TOO_MANY_OPEN_REVIEWS
    │   ├── ReviewExpired              REVIEW_EXPIRED (an operator expired the review)
    │   └── BeyondCheckpoint           BEYOND_CHECKPOINT: the audit log has not signed that far yet
    ├── QuotaExceeded                  RESOURCE_EXHAUSTED with a reason: a budget of the principal is spent
    │   ├── CallRateExceeded           CALL_RATE_EXCEEDED
    │   └── ContentBudgetExceeded      CONTENT_BUDGET_EXCEEDED
    ├── DecisionConflict               ALREADY_EXISTS, DECISION_CONFLICT
    ├── CheckpointIntegrity            DATA_LOSS, CHECKPOINT_INTEGRITY
    ├── Unavailable                    UNAVAILABLE or RESOURCE_EXHAUSTED, after the retries ran out
    │   ├── CheckpointSaveFailed       CHECKPOINT_SAVE_FAILED: retry with the same request
    │   └── ReplyLost                  REPLY_LOST: the effect committed, its reply was withheld
    ├── DeadlineExceeded               DEADLINE_EXCEEDED, after the retries ran out
    └── ServerError                    anything else (INTERNAL, UNKNOWN, CANCELLED, ...)
        └── WorkflowProtocolError      INTERNAL, WORKFLOW_PROTOCOL: the workflow broke an invariant

A class for a reason names it (``reason=reasons.STALE_PROPOSAL``); the status it is raised with, and
whether it is definite, are the declaration's (``decisionflow.reasons``): the table below is built
from it, and importing this module fails if a class's ``definite`` disagrees with it. A reason
declared without a class of its own is raised as its status's class (PreconditionFailed for a
FAILED_PRECONDITION). docs/clients.md lists each reason's status, definiteness and metadata keys.

``definite`` is True only when the request certainly had no effect: a refusal with
INVALID_ARGUMENT, FAILED_PRECONDITION, ALREADY_EXISTS, PERMISSION_DENIED, UNAUTHENTICATED or
NOT_FOUND, a checkpoint refused as tampered (it needs an operator, not a retry), a spent budget
(refused before anything ran), or a checkpoint that could not be saved (checked before anything is
written; retried all the same, and after retries indeterminate). Everything else is indeterminate:
the server may have acted before the reply was lost, so the outcome must be settled by a lookup or a
retry with the same operation id. ``retry_after`` is the delay the server's RetryInfo asked for
(seconds; None when it sent none): the retry policy waits at least that long before repeating the call.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc

from decisionflow import reasons
from decisionflow.client._error_base import (
    BY_REASON,
    CALLER_DEPENDENT_CODES,
    DEFINITE_CODES,
    INDETERMINATE_CODES,
    DecisionflowError,
    definite_by_status,
)
from decisionflow.client.views import Decision, OperationState
from decisionflow.status_details import error_info, retry_delay

# The base and its definiteness live in _error_base; every class and function is read from here.
__all__ = [
    "DEFINITE_CODES",
    "BeyondCheckpoint",
    "CallRateExceeded",
    "CaseHasOpenProposal",
    "CheckpointIntegrity",
    "CheckpointSaveFailed",
    "ContentBudgetExceeded",
    "DeadlineExceeded",
    "DecisionConflict",
    "DecisionRequired",
    "DecisionflowError",
    "FourEyes",
    "IdempotencyKeyReused",
    "InvalidRequest",
    "KeyRetentionExceeded",
    "NotEligibleToDecide",
    "NotFound",
    "NotRedrivable",
    "PermissionDenied",
    "PreconditionFailed",
    "QuotaExceeded",
    "ReplyLost",
    "ReviewExpired",
    "ServerError",
    "StaleProposal",
    "TooManyOpenReviews",
    "TooManyStreams",
    "Unauthenticated",
    "Unavailable",
    "WatchFellBehind",
    "WorkflowProtocolError",
    "WorkflowVersionMismatch",
    "error_class",
    "map_rpc_error",
]


class InvalidRequest(DecisionflowError, reason=reasons.INVALID_ARGUMENT):
    """The request was malformed (violations name the fields); nothing was written."""


class DecisionRequired(InvalidRequest, reason=reasons.DECISION_REQUIRED):
    """The decision was omitted (or unspecified): an omitted decision is never taken as consent."""


class NotFound(DecisionflowError, reason=reasons.NOT_FOUND):
    """The case or operation does not exist; operation_id or case_id names it."""

    @property
    def case_id(self) -> str:
        """The case that was not found ("" when the refusal named an operation)."""
        return self.metadata.get(reasons.CASE_ID, "")


class Unauthenticated(DecisionflowError, reason=reasons.UNAUTHENTICATED):
    """The call carried no valid credentials."""


class PermissionDenied(DecisionflowError, reason=reasons.PERMISSION_DENIED):
    """The authenticated principal lacks a role the method requires."""


class FourEyes(PermissionDenied, reason=reasons.FOUR_EYES):
    """The four-eyes rule: the principal authored the proposal and cannot decide it."""

    @property
    def principal(self) -> str:
        """The principal that was refused."""
        return self.metadata.get(reasons.PRINCIPAL, "")


class PreconditionFailed(DecisionflowError):
    """The system is not in a state that allows the call; retrying the same request will not help."""


class StaleProposal(PreconditionFailed, reason=reasons.STALE_PROPOSAL):
    """The operation is no longer the case's current proposal; current_operation_id names the current one."""

    @property
    def current_operation_id(self) -> str:
        """The case's current operation id, as reported by the server ("" when not reported)."""
        return self.metadata.get(reasons.CURRENT_OPERATION_ID, "")


class CaseHasOpenProposal(PreconditionFailed, reason=reasons.CASE_HAS_OPEN_PROPOSAL):
    """The case's undecided current proposal was not named; start again naming current_operation_id to replace it."""

    @property
    def case_id(self) -> str:
        """The case, as reported by the server."""
        return self.metadata.get(reasons.CASE_ID, "")

    @property
    def current_operation_id(self) -> str:
        """The case's current, undecided operation id, as reported by the server."""
        return self.metadata.get(reasons.CURRENT_OPERATION_ID, "")


class NotRedrivable(PreconditionFailed, reason=reasons.NOT_REDRIVABLE):
    """The operation is no longer APPROVED or UNKNOWN, so a re-drive has nothing to do: it is settled."""

    @property
    def state(self) -> OperationState:
        """The state the operation is in (UNSPECIFIED when the server did not name one this client knows)."""
        name = self.metadata.get(reasons.STATE, "").removeprefix("OPERATION_STATE_")
        return OperationState.__members__.get(name, OperationState.UNSPECIFIED)


class IdempotencyKeyReused(PreconditionFailed, reason=reasons.IDEMPOTENCY_KEY_REUSED):
    """An effect exists under this operation id with another payload; it was left unchanged."""


class KeyRetentionExceeded(PreconditionFailed, reason=reasons.KEY_RETENTION_EXCEEDED):
    """Nothing written: the key is absent and may have been pruned (first attempt beyond the retention); escalate."""

    # Definite for this call only: an earlier attempt may have written the effect before its key was
    # pruned, so the operation's outcome stays unknown and it must never be re-driven.

    @property
    def first_attempted_at(self) -> str:
        """The first attempt the refusal was judged by (RFC 3339), as reported by the receiver."""
        return self.metadata.get(reasons.FIRST_ATTEMPTED_AT, "")

    @property
    def key_retention(self) -> str:
        """The receiver's key retention (for example "86400s"), as reported by the receiver."""
        return self.metadata.get(reasons.KEY_RETENTION, "")


class WorkflowVersionMismatch(PreconditionFailed, reason=reasons.WORKFLOW_VERSION_MISMATCH):
    """The pending review was checkpointed by a workflow graph the server no longer runs."""

    @property
    def recorded(self) -> str:
        """The workflow (name@version) the pending review was recorded under."""
        return self.metadata.get(reasons.RECORDED, "")

    @property
    def running(self) -> str:
        """The workflow (name@version) the server runs."""
        return self.metadata.get(reasons.RUNNING, "")


class TooManyOpenReviews(PreconditionFailed, reason=reasons.TOO_MANY_OPEN_REVIEWS):
    """The author already has open_review_limit undecided proposals in the inbox: no more until some are decided."""

    @property
    def principal(self) -> str:
        """The author that was refused."""
        return self.metadata.get(reasons.PRINCIPAL, "")

    @property
    def open_review_limit(self) -> int | None:
        """The cap on one author's open reviews, as reported by the server (None when not reported)."""
        value = self.metadata.get(reasons.OPEN_REVIEW_LIMIT, "")
        return int(value) if value.isdigit() else None


class NotEligibleToDecide(PermissionDenied, reason=reasons.NOT_ELIGIBLE_TO_DECIDE):
    """The review's rule does not count the principal's vote now; nothing was recorded."""

    @property
    def vote_refusal(self) -> str:
        """Why the rule does not count the vote (``not_eligible``, ``author``, ...)."""
        return self.metadata.get(reasons.VOTE_REFUSAL, "")


class ReviewExpired(PreconditionFailed, reason=reasons.REVIEW_EXPIRED):
    """An operator expired the undecided review: it can no longer be decided; edit it to ask for a new review."""


class BeyondCheckpoint(PreconditionFailed, reason=reasons.BEYOND_CHECKPOINT):
    """What was asked of the audit log lies beyond the latest checkpoint (or the tree size asked): ask later."""

    @property
    def checkpoint_size(self) -> int | None:
        """The latest signed checkpoint's size, as reported by the server (None when not reported)."""
        value = self.metadata.get(reasons.CHECKPOINT_SIZE, "")
        return int(value) if value.isdigit() else None


class QuotaExceeded(DecisionflowError):
    """A budget of the calling principal is spent; nothing was written; the same request may pass after retry_after."""

    # Refused before anything ran. After earlier attempts of the same call it is not (see map_rpc_error).
    always_definite = True

    @property
    def principal(self) -> str:
        """The principal whose budget is spent."""
        return self.metadata.get(reasons.PRINCIPAL, "")


class CallRateExceeded(QuotaExceeded, reason=reasons.CALL_RATE_EXCEEDED):
    """The principal sent StartReview and EditProposal calls faster than its rate allows."""


class ContentBudgetExceeded(QuotaExceeded, reason=reasons.CONTENT_BUDGET_EXCEEDED):
    """The principal sent more bytes of proposal content than its budget allows per minute."""

    @property
    def content_bytes(self) -> int | None:
        """The size of the refused request's content, as reported by the server (None when not reported)."""
        value = self.metadata.get(reasons.CONTENT_BYTES, "")
        return int(value) if value.isdigit() else None


class TooManyStreams(QuotaExceeded, reason=reasons.TOO_MANY_STREAMS):
    """The principal holds as many WatchEvents streams open as one principal may; close one or retry later."""

    @property
    def stream_limit(self) -> int | None:
        """The most streams one principal may hold open, as reported by the server (None when not reported)."""
        value = self.metadata.get(reasons.STREAM_LIMIT, "")
        return int(value) if value.isdigit() else None


class DecisionConflict(DecisionflowError, reason=reasons.DECISION_CONFLICT):
    """Another decision is already recorded for the operation; decisions are immutable."""

    @property
    def recorded_decision(self) -> Decision:
        """The decision on record (UNSPECIFIED when the server did not name it)."""
        return Decision.parse(self.metadata.get(reasons.RECORDED_DECISION, ""))


class CheckpointIntegrity(DecisionflowError, reason=reasons.CHECKPOINT_INTEGRITY):
    """The stored checkpoint failed its integrity check and was refused, never decoded; an operator must act."""

    always_definite = True

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint that was refused."""
        return self.metadata.get(reasons.CHECKPOINT_ID, "")


class Unavailable(DecisionflowError, reason=reasons.UNAVAILABLE):
    """The server stayed unavailable (or overloaded) through every retry; the outcome is not known."""


class WatchFellBehind(Unavailable, reason=reasons.WATCH_FELL_BEHIND):
    """The watcher read more slowly than events were sequenced; reconnect from next_index (nothing is lost)."""

    @property
    def next_index(self) -> int | None:
        """The index the watch resumes from, as reported by the server (None when not reported)."""
        value = self.metadata.get(reasons.NEXT_INDEX, "")
        return int(value) if value.isdigit() else None


class CheckpointSaveFailed(Unavailable, reason=reasons.CHECKPOINT_SAVE_FAILED):
    """The orchestrator could not store a checkpoint, so the request was not recorded; retry it as it was."""

    # Saves are checked before anything is written. After earlier attempts of the same call it is not
    # definite (see map_rpc_error): one of them may have acted.
    always_definite = True


class ReplyLost(Unavailable, reason=reasons.REPLY_LOST):
    """The receiver committed the effect but withheld the reply (fault switch); a lookup shows it."""


class DeadlineExceeded(DecisionflowError):
    """The call's deadline passed; the server may still have acted."""


class ServerError(DecisionflowError):
    """Any other failure (internal error, cancelled call, unexpected status)."""


class WorkflowProtocolError(ServerError, reason=reasons.WORKFLOW_PROTOCOL):
    """The orchestrator's workflow broke one of the service's invariants (a server fault)."""


def _declared_class(name: str) -> type[DecisionflowError]:
    """Return the class of this module decisionflow.reasons names; a name that is none fails the import."""
    named = globals().get(name)
    if not (isinstance(named, type) and issubclass(named, DecisionflowError)):
        raise TypeError(f"decisionflow.reasons names {name!r}, which is no error class of {__name__}")
    return named


# The one mapping from (status, ErrorInfo reason) to class: the classes that name a reason, and the class
# of each status (decisionflow.reasons.STATUS_RULES). Reason "" matches any reason of that status, so a
# reason this client does not know, or one declared without a class of its own, gets its status's class.
_CLASSES: Mapping[tuple[grpc.StatusCode, str], type[DecisionflowError]] = {
    **{(grpc.StatusCode[rule.status], ""): _declared_class(rule.raised_as) for rule in reasons.STATUS_RULES},
    **BY_REASON,
}
_OTHER_STATUS_CLASS = _declared_class(reasons.OTHER_STATUS_RAISED_AS)


def error_class(code: grpc.StatusCode, reason: str) -> type[DecisionflowError]:
    """Return the class a failure with this status code and ErrorInfo reason is raised as."""
    return _CLASSES.get((code, reason)) or _CLASSES.get((code, ""), _OTHER_STATUS_CLASS)


def map_rpc_error(err: grpc.RpcError, *, attempts: int = 1) -> DecisionflowError:
    """Return the typed error for a failed call; attempts is how many times the call was sent.

    A caller-dependent refusal (PERMISSION_DENIED, UNAUTHENTICATED, NOT_FOUND, RESOURCE_EXHAUSTED), or
    one definite only by its reason (CHECKPOINT_SAVE_FAILED), after an earlier indeterminate attempt is
    itself indeterminate: that attempt may have acted.
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
    cls = error_class(code, reason)
    definite: bool | None = None
    if attempts > 1 and code in CALLER_DEPENDENT_CODES | INDETERMINATE_CODES:
        definite = False
    return cls(
        code,
        message,
        reason=reason,
        metadata=metadata,
        violations=violations,
        attempts=attempts,
        definite=definite,
        retry_after=retry_delay(err),
    )


def _check_against_the_declaration() -> None:
    """Each declared reason, and each status without one, is raised as a class as definite as declared."""
    pairs = [(rule.status, "", rule.definite) for rule in reasons.STATUS_RULES]
    pairs += [(declared.status, declared.reason, declared.definite) for declared in reasons.REFUSALS.values()]
    for status, reason, definite in pairs:
        code = grpc.StatusCode[status]
        cls = error_class(code, reason)
        if definite_by_status(cls, code) is not definite:
            raise TypeError(
                f"{reason or status} is declared definite={definite}, but {cls.__name__} with {status} says "
                "otherwise: give it a class of its own (reason=), or correct the declaration"
            )


_check_against_the_declaration()
