"""Orchestrator refusals. Each maps to one status in grpc_api.STATUS_TABLE.

Metadata names the operation ``operation_id`` (a case ``case_id``) and spells enum values as
the proto does (``DECISION_APPROVE``, ``OPERATION_STATE_COMMITTED``); the attributes keep the
domain's own types.

DomainError (decisionflow_server.foundation.errors)
├── InvalidRequest             bad fields, decision omitted          INVALID_ARGUMENT
├── Unavailable                database down, shutting down          UNAVAILABLE
├── KeyRetentionExceeded       a re-drive beyond the receiver's       FAILED_PRECONDITION
│                              key retention: escalate
└── OrchestratorError
    ├── NotFound               unknown case or operation             NOT_FOUND
    ├── StaleProposal          operation is not the case's current   FAILED_PRECONDITION
    ├── CaseHasOpenProposal    case's current proposal is undecided  FAILED_PRECONDITION
    ├── DecisionConflict       another decision is recorded          ALREADY_EXISTS
    ├── NotRedrivable          operation is not APPROVED/UNKNOWN      FAILED_PRECONDITION
    ├── ReviewExpired          an operator expired the review, or    FAILED_PRECONDITION
    │                          its rule's deadline passed
    ├── NotEligibleToDecide    the review's rule does not count the  PERMISSION_DENIED
    │                          vote (author, earlier stage, groups)
    ├── WorkflowVersionMismatch checkpoint from another graph        FAILED_PRECONDITION
    ├── CheckpointIntegrity    checkpoint failed its HMAC check      DATA_LOSS
    ├── CheckpointSaveFailed   a checkpoint could not be stored      UNAVAILABLE
    ├── WorkflowProtocolError  the workflow broke an invariant       INTERNAL
    └── BudgetExceeded         a per-author budget is spent (orchestrator.quotas); nothing written
        ├── CallRateExceeded      calls faster than the rate         RESOURCE_EXHAUSTED + RetryInfo
        ├── ContentBudgetExceeded more content bytes than the budget RESOURCE_EXHAUSTED + RetryInfo
        └── TooManyOpenReviews    the author's inbox share is full   FAILED_PRECONDITION

The two rates are RESOURCE_EXHAUSTED with a RetryInfo: the same request succeeds once the bucket has
refilled, which the delay says. The open-review cap is FAILED_PRECONDITION: no wait helps until a
reviewer decides, or an operator expires, one of the author's reviews (as CASE_HAS_OPEN_PROPOSAL).
"""

from __future__ import annotations

from datetime import timedelta

from decisionflow import reasons
from decisionflow import vocabulary_wire as wire
from decisionflow.review_rules import VoteRefusal
from decisionflow.v1 import common_pb2
from decisionflow.vocabulary import Decision, OperationState
from decisionflow_server.foundation.errors import DomainError, duration_text

# What a NotFound names: a case by its case id; an operation, proposal or pending review by its operation id.
_ID_KEYS = {"case": reasons.CASE_ID}


class OrchestratorError(DomainError):
    """Base of the orchestrator's own refusals."""


class NotFound(OrchestratorError):
    """No proposal, case or operation with that id."""

    reason = reasons.NOT_FOUND

    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} {ident} not found", metadata={_ID_KEYS.get(what, reasons.OPERATION_ID): ident})
        self.what = what
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


class CaseHasOpenProposal(OrchestratorError):
    """The case's current proposal is undecided and other content was started without naming it."""

    reason = reasons.CASE_HAS_OPEN_PROPOSAL

    def __init__(self, case_id: str, current_operation_id: str) -> None:
        super().__init__(
            f"case {case_id} has an undecided proposal {current_operation_id}; decide it, edit it, "
            "or start again naming it as expected_operation_id to replace it",
            metadata={reasons.CASE_ID: case_id, reasons.CURRENT_OPERATION_ID: current_operation_id},
        )
        self.case_id = case_id
        self.current_operation_id = current_operation_id


class DecisionConflict(OrchestratorError):
    """A different decision is already recorded for the operation; decisions are immutable."""

    reason = reasons.DECISION_CONFLICT

    def __init__(self, operation_id: str, recorded: Decision | str) -> None:
        decision = Decision(recorded)
        super().__init__(
            f"operation {operation_id} was already decided: {decision.label}",
            metadata={
                reasons.OPERATION_ID: operation_id,
                reasons.RECORDED_DECISION: common_pb2.Decision.Name(wire.decision_to_pb(decision)),
            },
        )
        self.operation_id = operation_id
        self.recorded = decision


class NotRedrivable(OrchestratorError):
    """Only an APPROVED or UNKNOWN operation can be re-driven."""

    reason = reasons.NOT_REDRIVABLE

    def __init__(self, operation_id: str, state: OperationState | str) -> None:
        current = OperationState(state)
        super().__init__(
            f"operation {operation_id} is {current.label}; only approved or unknown operations are re-driven",
            metadata={
                reasons.OPERATION_ID: operation_id,
                reasons.STATE: common_pb2.OperationState.Name(wire.state_to_pb(current)),
            },
        )
        self.operation_id = operation_id
        self.state = current


class NotEligibleToDecide(OrchestratorError):
    """The review's rule does not count the principal's vote now; nothing was recorded."""

    reason = reasons.NOT_ELIGIBLE_TO_DECIDE

    def __init__(self, operation_id: str, principal: str, refusal: VoteRefusal) -> None:
        super().__init__(
            f"the review of operation {operation_id} does not count a vote of {principal}: {refusal.explanation}",
            metadata={
                reasons.OPERATION_ID: operation_id,
                reasons.PRINCIPAL: principal,
                reasons.VOTE_REFUSAL: refusal.value,
            },
        )
        self.operation_id = operation_id
        self.principal = principal
        self.refusal = refusal


class ReviewExpired(OrchestratorError):
    """The operation's review was expired by an operator (expire-reviews) before anyone decided it."""

    reason = reasons.REVIEW_EXPIRED

    def __init__(self, operation_id: str) -> None:
        super().__init__(
            f"the review of operation {operation_id} expired undecided; it can no longer be decided "
            "(an edit of it starts a new review)",
            metadata={reasons.OPERATION_ID: operation_id},
        )
        self.operation_id = operation_id


class WorkflowVersionMismatch(OrchestratorError):
    """The pending review was checkpointed by a workflow graph this process does not run."""

    reason = reasons.WORKFLOW_VERSION_MISMATCH

    def __init__(self, operation_id: str, recorded: str, running: str) -> None:
        super().__init__(
            f"pending review of {operation_id} was recorded under workflow {recorded}; this process runs "
            f"{running}; re-open it with `decisionflow-orchestrator reopen-reviews`",
            metadata={reasons.OPERATION_ID: operation_id, reasons.RECORDED: recorded, reasons.RUNNING: running},
        )
        self.operation_id = operation_id
        self.recorded = recorded
        self.running = running


class CheckpointIntegrity(OrchestratorError):
    """A stored checkpoint failed its HMAC check (tampered or foreign); it was not decoded."""

    reason = reasons.CHECKPOINT_INTEGRITY

    def __init__(self, checkpoint_id: str, why: str, *, operation_id: str = "") -> None:
        super().__init__(
            f"checkpoint {checkpoint_id} refused: {why}",
            metadata={reasons.OPERATION_ID: operation_id, reasons.CHECKPOINT_ID: checkpoint_id},
        )
        self.operation_id = operation_id
        self.checkpoint_id = checkpoint_id


class CheckpointSaveFailed(OrchestratorError):
    """A checkpoint could not be stored, so the request was not recorded."""

    reason = reasons.CHECKPOINT_SAVE_FAILED


class WorkflowProtocolError(OrchestratorError):
    """The workflow did not behave as the service requires (for example a request for another operation)."""

    reason = reasons.WORKFLOW_PROTOCOL


class BudgetExceeded(OrchestratorError):
    """A budget of the calling principal is spent (orchestrator.quotas); nothing was written."""

    principal: str


class CallRateExceeded(BudgetExceeded):
    """The principal sent StartReview and EditProposal calls faster than its call rate allows."""

    reason = reasons.CALL_RATE_EXCEEDED

    def __init__(self, principal: str, retry_after: timedelta) -> None:
        super().__init__(
            f"{principal} is over its call rate for StartReview and EditProposal; "
            f"retry after {duration_text(retry_after)}",
            metadata={reasons.PRINCIPAL: principal, reasons.RETRY_AFTER: duration_text(retry_after)},
            retry_after=retry_after,
        )
        self.principal = principal


class ContentBudgetExceeded(BudgetExceeded):
    """The principal sent more bytes of proposal content than its budget allows per minute."""

    reason = reasons.CONTENT_BUDGET_EXCEEDED

    def __init__(self, principal: str, retry_after: timedelta, content_bytes: int) -> None:
        super().__init__(
            f"{principal} is over its budget of proposal content bytes; this request's {content_bytes} bytes "
            f"fit after {duration_text(retry_after)}",
            metadata={
                reasons.PRINCIPAL: principal,
                reasons.RETRY_AFTER: duration_text(retry_after),
                reasons.CONTENT_BYTES: str(content_bytes),
            },
            retry_after=retry_after,
        )
        self.principal = principal
        self.content_bytes = content_bytes


class TooManyOpenReviews(BudgetExceeded):
    """The author already has the most undecided proposals in the inbox one author may hold."""

    reason = reasons.TOO_MANY_OPEN_REVIEWS

    def __init__(self, principal: str, limit: int) -> None:
        super().__init__(
            f"{principal} already has {limit} undecided proposals waiting for review, the most one author may "
            "have; wait for reviewers to decide some (or for an operator to expire abandoned ones)",
            metadata={reasons.PRINCIPAL: principal, reasons.OPEN_REVIEW_LIMIT: str(limit)},
        )
        self.principal = principal
        self.limit = limit


class TooManyStreams(BudgetExceeded):
    """The principal holds as many WatchEvents streams open in this process as one principal may."""

    reason = reasons.TOO_MANY_STREAMS

    def __init__(self, principal: str, limit: int) -> None:
        super().__init__(
            f"{principal} holds {limit} WatchEvents streams open on this server, the most one principal may; "
            "close one first",
            metadata={reasons.PRINCIPAL: principal, reasons.STREAM_LIMIT: str(limit)},
        )
        self.principal = principal


class WatchFellBehind(OrchestratorError):
    """The watcher did not take the stream's next message in time; it resumes from next_index, losing nothing."""

    reason = reasons.WATCH_FELL_BEHIND

    def __init__(self, next_index: int, stalled_seconds: float) -> None:
        super().__init__(
            f"the watcher took no message for {stalled_seconds:g} s; reconnect with start_index {next_index}",
            metadata={reasons.NEXT_INDEX: str(next_index)},
        )
        self.next_index = next_index


class NothingAuthored(OrchestratorError):
    """An author asked to watch a case (or an operation's case) they created no proposal in."""

    reason = reasons.NOT_FOUND

    def __init__(self, *, case_id: str | None, operation_id: str | None) -> None:
        metadata = {reasons.OPERATION_ID: operation_id} if operation_id else {reasons.CASE_ID: case_id or ""}
        named = f"operation {operation_id}" if operation_id else f"case {case_id}"
        super().__init__(
            f"no proposal of {named} was created by the caller, so it has no events to watch", metadata=metadata
        )
