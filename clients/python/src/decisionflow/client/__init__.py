"""Python clients of the decisionflow services.

Every call carries a deadline, transient failures (UNAVAILABLE, DEADLINE_EXCEEDED,
RESOURCE_EXHAUSTED) are retried under a named policy from ``decisionflow.retry``, and what
remains is raised as a typed error from ``decisionflow.client.errors``. Results are frozen
dataclasses (``decisionflow.client.views``), never pb2 messages.

Tracing: on a channel from ``decisionflow.channels.open_channel`` (or ``open_aio_channel``), each
call is a CLIENT span whose W3C ``traceparent`` reaches the server, once the application has set up
an OpenTelemetry SDK (``trace.set_tracer_provider``); the orchestrator's spans then join the
application's trace (docs/observability.md). Without an SDK nothing is added to a call.

``AuditClient`` reads the orchestrator's audit log (roles auditor or operator), and
``verify_operation`` checks that the log holds an operation against a checkpoint the caller opened
with the log's verifier key (docs/audit-log.md, "The AuditService").

``AsyncReviewClient``, ``AsyncOperationsClient``, ``AsyncReceiverClient`` and ``AsyncAuditClient`` are
the same clients on a ``grpc.aio`` channel (``decisionflow.channels.open_aio_channel``);
examples/approve_async.py drives one with tenacity's ``AsyncRetrying``.

Approving against a running orchestrator; retrying the approval, by hand or with tenacity,
is safe because the decision is bound to the operation id and the server replays it::

    import tenacity

    from decisionflow.channels import insecure_channel
    from decisionflow.client import DecisionflowError, EvidenceItem, Outcome, PolicyRef, ReviewClient

    channel = insecure_channel("127.0.0.1:50051")
    try:
        reviews = ReviewClient(channel, timeout=5.0, metadata=[("authorization", "Bearer <token>")])
        started = reviews.start_review(
            case_id="T-1042",
            action="record_support_review",
            body="This is a known firmware issue; version 4.2.1 fixes it.",
            evidence=[EvidenceItem("kb-firmware-421", 3, "Fixed in 4.2.1.")],
            policy=PolicyRef("support-replies", "2026-10", allowance_units=0),
        )
        operation_id = started.proposal.operation_id
        # An outer loop over indeterminate errors: each try names the same operation id.
        for attempt in tenacity.Retrying(
            stop=tenacity.stop_after_attempt(3),
            retry=tenacity.retry_if_exception(lambda e: isinstance(e, DecisionflowError) and not e.definite),
            reraise=True,
        ):
            with attempt:
                result = reviews.approve(operation_id)
        if result.outcome is Outcome.UNKNOWN:
            print("recorded; the effect is not confirmed yet (the reconciler settles it)")
        else:
            print(result.outcome, "replayed" if result.replay else "new", result.operation.receipt_id)
    finally:
        channel.close()
"""

from decisionflow.client.audit import AsyncAuditClient, AuditClient
from decisionflow.client.audit_views import (
    AuditLeaf,
    ConsistencyProof,
    InclusionProofs,
    LeafInclusion,
    LoggedOperation,
    SignedCheckpoint,
    verify_operation,
)
from decisionflow.client.errors import (
    BeyondCheckpoint,
    CallRateExceeded,
    CaseHasOpenProposal,
    CheckpointIntegrity,
    CheckpointSaveFailed,
    ContentBudgetExceeded,
    DeadlineExceeded,
    DecisionConflict,
    DecisionflowError,
    DecisionRequired,
    FourEyes,
    IdempotencyKeyReused,
    InvalidRequest,
    KeyRetentionExceeded,
    NotEligibleToDecide,
    NotFound,
    NotRedrivable,
    PermissionDenied,
    PreconditionFailed,
    QuotaExceeded,
    ReplyLost,
    ReviewExpired,
    ServerError,
    StaleProposal,
    TooManyOpenReviews,
    Unauthenticated,
    Unavailable,
    WorkflowProtocolError,
    WorkflowVersionMismatch,
    map_rpc_error,
)
from decisionflow.client.events import AsyncEventsClient, EventsClient, EventView, Heartbeat, WaitTimedOut
from decisionflow.client.operations import AsyncOperationsClient, OperationsClient
from decisionflow.client.receiver import AsyncReceiverClient, ReceiverClient
from decisionflow.client.review import AsyncReviewClient, ReviewClient
from decisionflow.client.views import (
    AppliedEffect,
    ApplyResult,
    ApproveResult,
    AttemptLease,
    Caller,
    Consistency,
    Decision,
    EditedProposal,
    EffectRecord,
    LookupAnswer,
    LookupBatch,
    LookupNote,
    LookupStatus,
    OperationPage,
    OperationState,
    OperationView,
    Outcome,
    PendingReviewEntry,
    PendingReviewPage,
    PendingReviewView,
    ProposalRecord,
    ProposalView,
    Receipt,
    RedriveResult,
    ReviewProgress,
    Role,
    Settlement,
    SettleResult,
    StageTally,
    StartedReview,
)
from decisionflow.identity import EvidenceItem, PolicyRef
from decisionflow.vocabulary import CaseId, EffectRequest, OperationId

__all__ = [
    "AppliedEffect",
    "ApplyResult",
    "ApproveResult",
    "AsyncAuditClient",
    "AsyncEventsClient",
    "AsyncOperationsClient",
    "AsyncReceiverClient",
    "AsyncReviewClient",
    "AttemptLease",
    "AuditClient",
    "AuditLeaf",
    "BeyondCheckpoint",
    "CallRateExceeded",
    "Caller",
    "CaseHasOpenProposal",
    "CaseId",
    "CheckpointIntegrity",
    "CheckpointSaveFailed",
    "Consistency",
    "ConsistencyProof",
    "ContentBudgetExceeded",
    "DeadlineExceeded",
    "Decision",
    "DecisionConflict",
    "DecisionRequired",
    "DecisionflowError",
    "EditedProposal",
    "EffectRecord",
    "EffectRequest",
    "EventView",
    "EventsClient",
    "EvidenceItem",
    "FourEyes",
    "Heartbeat",
    "IdempotencyKeyReused",
    "InclusionProofs",
    "InvalidRequest",
    "KeyRetentionExceeded",
    "LeafInclusion",
    "LoggedOperation",
    "LookupAnswer",
    "LookupBatch",
    "LookupNote",
    "LookupStatus",
    "NotEligibleToDecide",
    "NotFound",
    "NotRedrivable",
    "OperationId",
    "OperationPage",
    "OperationState",
    "OperationView",
    "OperationsClient",
    "Outcome",
    "PendingReviewEntry",
    "PendingReviewPage",
    "PendingReviewView",
    "PermissionDenied",
    "PolicyRef",
    "PreconditionFailed",
    "ProposalRecord",
    "ProposalView",
    "QuotaExceeded",
    "Receipt",
    "ReceiverClient",
    "RedriveResult",
    "ReplyLost",
    "ReviewClient",
    "ReviewExpired",
    "ReviewProgress",
    "Role",
    "ServerError",
    "SettleResult",
    "Settlement",
    "SignedCheckpoint",
    "StageTally",
    "StaleProposal",
    "StartedReview",
    "TooManyOpenReviews",
    "Unauthenticated",
    "Unavailable",
    "WaitTimedOut",
    "WorkflowProtocolError",
    "WorkflowVersionMismatch",
    "map_rpc_error",
    "verify_operation",
]
