"""gRPC servicers of the orchestrator: ReviewService and OperationsService (AuditService's is
orchestrator.audit.grpc_api).

Proto ↔ domain only. Domain errors become statuses through STATUS_TABLE, the one table of
this server (the audit log's refusals included); the reviewer is the authenticated principal,
never a request field.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from decisionflow import vocabulary_wire as wire
from decisionflow.identity import is_operation_id
from decisionflow.v1 import operations_pb2, operations_pb2_grpc, review_pb2, review_pb2_grpc
from decisionflow.vocabulary import LookupStatus, OperationId, OperationState, Receipt
from decisionflow_server.foundation import page_tokens
from decisionflow_server.foundation.errors import FieldViolation, InvalidRequest, KeyRetentionExceeded, Unavailable
from decisionflow_server.runtime.auth import AUTH_STATUS, Role, current_principal
from decisionflow_server.runtime.rpc_errors import StatusTable, status_table
from orchestrator import errors
from orchestrator.audit import errors as audit_errors
from orchestrator.domain import ProposalView, Settlement
from orchestrator.service import OrchestratorService
from orchestrator.store import InboxKey, Reader, inbox_key
from orchestrator.validation import check_case_id, check_operation_id, pending_page_size, pending_review_filter
from orchestrator.wire import (
    CONSISTENCY_FROM_PB,
    LOOKUP_FROM_PB,
    STATE_FROM_PB,
    caller_to_pb,
    decision_from_pb,
    edit_from_pb,
    enum_from_pb,
    from_timestamp,
    operation_to_pb,
    pending_entry_to_pb,
    proposal_to_pb,
    review_to_pb,
    settle_result_to_pb,
    start_from_pb,
)

# Every refusal of this server: the shared ones and the orchestrator's own (orchestrator.errors).
STATUS_TABLE: StatusTable = {
    **AUTH_STATUS,
    **status_table(
        InvalidRequest, Unavailable, KeyRetentionExceeded, errors.OrchestratorError, audit_errors.AuditLogError
    ),
}

# Time kept back from the caller's deadline so the reply (even "Unknown") still reaches it: after
# the last Apply attempt the orchestrator still reads the operation, logs, and sends the answer,
# which on a loaded 2-core machine was seen to take more than 100 ms.
REPLY_MARGIN_SECONDS = 0.25
# gRPC sends the caller's deadline as a grpc-timeout header of a few digits and a unit, and its
# core rounds the value *up* to the next step the unit can express: 10 ms up to 10 s, 100 ms up to
# 100 s, 1 s up to 1,000 s, and so on; never more than 1% of the timeout. On top of that a few
# milliseconds go astray between the two clocks (a 1 s call is seen with about 1.009 s left). The
# deadline this server sees can therefore be later than the caller's by more than the fixed
# margin (a 12 s call is seen with 12.1 s left); the share and the slack below take that back.
TIMEOUT_ROUNDING_SHARE = 0.01
CLOCK_SLACK_SECONDS = 0.01
# Should the work still be running that long before the caller's deadline, the answer is read
# from the store and sent instead; this is the time kept back for that read and the reply.
REPLY_SEND_SECONDS = 0.06
MAX_BATCH = 1000
MAX_RECEIPT_ID_CHARS = 64  # the width of operations.receipt_id
MAX_MIN_AGE = timedelta(days=36_525)
MAX_PAGE = 5000
DEFAULT_PAGE = 500
# The name ListPendingReviews' page tokens carry, so a token of ListOperations is refused there.
PENDING_LISTING = "pending_reviews"

Context = grpc.aio.ServicerContext[Any, Any]


def reply_margin(remaining: float, kept: float = REPLY_MARGIN_SECONDS) -> float:
    """Return how long before the deadline it sees (remaining seconds away) a server must answer
    so that the answer reaches the caller kept seconds before the caller's own deadline."""
    return kept + CLOCK_SLACK_SECONDS + remaining * TIMEOUT_ROUNDING_SHARE


def _before_deadline(context: Context, kept: float) -> float | None:
    remaining = context.time_remaining()
    if remaining is None:
        return None
    return time.monotonic() + max(0.0, remaining - reply_margin(remaining, kept))


def _deadline(context: Context) -> float | None:
    return _before_deadline(context, REPLY_MARGIN_SECONDS)


def _reply_by(context: Context) -> float | None:
    # Later than _deadline: the work after the last Apply attempt gets the margin between the two,
    # and whatever it has not finished by then is answered from the store (orchestrator.service).
    return _before_deadline(context, REPLY_SEND_SECONDS)


class ReviewServicer(review_pb2_grpc.ReviewServiceServicer):
    """decisionflow.v1.ReviewService over the orchestrator's use cases."""

    def __init__(self, service: OrchestratorService) -> None:
        self._proposals = service.proposals
        self._decisions = service.decisions

    async def StartReview(
        self, request: review_pb2.StartReviewRequest, context: Context
    ) -> review_pb2.StartReviewResponse:
        """Record a proposal and open its pending review."""
        started = await self._proposals.start_review(start_from_pb(request), current_principal().name)
        current = started.created or (await self._proposals.get_proposal(started.proposal.operation_id)).current
        return review_pb2.StartReviewResponse(
            proposal=proposal_to_pb(started.proposal, current),
            created=started.created,
            pending_review=review_to_pb(started.review, started.progress),
        )

    async def GetProposal(
        self, request: review_pb2.GetProposalRequest, context: Context
    ) -> review_pb2.GetProposalResponse:
        """Return a proposal by operation id, or a case's current proposal."""
        if bool(request.operation_id) == bool(request.case_id):
            raise InvalidRequest([FieldViolation("operation_id", "set exactly one of operation_id and case_id")])
        view: ProposalView
        if request.case_id:
            view = await self._proposals.current_proposal(check_case_id(request.case_id))
        else:
            view = await self._proposals.get_proposal(check_operation_id(request.operation_id))
        return review_pb2.GetProposalResponse(
            proposal=proposal_to_pb(view.proposal, view.current),
            operation=operation_to_pb(view.operation, view.progress),
        )

    async def EditProposal(
        self, request: review_pb2.EditProposalRequest, context: Context
    ) -> review_pb2.EditProposalResponse:
        """Replace the case's current proposal, or refuse as stale."""
        edited = await self._proposals.edit_proposal(edit_from_pb(request), current_principal().name)
        return review_pb2.EditProposalResponse(
            proposal=proposal_to_pb(edited.proposal, True),
            pending_review=review_to_pb(edited.review, edited.progress),
        )

    async def Approve(self, request: review_pb2.ApproveRequest, context: Context) -> review_pb2.ApproveResponse:
        """Record the authenticated reviewer's decision; the outcome may be Unknown."""
        decision = decision_from_pb(request.decision)  # checked first: an omitted decision is not consent
        operation_id = check_operation_id(request.operation_id)
        caller = current_principal()
        result = await self._decisions.decide(
            operation_id, decision, caller.name, _deadline(context), _reply_by(context), groups=caller.groups
        )
        return review_pb2.ApproveResponse(
            operation=operation_to_pb(result.operation, result.progress),
            outcome=wire.outcome_to_pb(result.outcome),
            replay=result.replay,
        )

    async def GetOperation(
        self, request: review_pb2.GetOperationRequest, context: Context
    ) -> review_pb2.GetOperationResponse:
        """Return one operation."""
        operation, progress = await self._proposals.operation_progress(check_operation_id(request.operation_id))
        return review_pb2.GetOperationResponse(operation=operation_to_pb(operation, progress))

    async def ListPendingReviews(
        self, request: review_pb2.ListPendingReviewsRequest, context: Context
    ) -> review_pb2.ListPendingReviewsResponse:
        """List the undecided current proposals matching the filters in the inbox's order, a page at a time."""
        limit = pending_page_size(request.page_size)
        filters = pending_review_filter(
            request.case_id if request.HasField("case_id") else None,
            request.case_id_prefix if request.HasField("case_id_prefix") else None,
            request.created_by if request.HasField("created_by") else None,
            request.action if request.HasField("action") else None,
        )
        after = _parse_inbox_token(request.page_token)
        listing = await self._proposals.list_pending_reviews(
            filters, limit, after, counted=request.include_total_size, reader=_reader()
        )
        page = listing.rows
        token = _inbox_token(inbox_key(page[-1])) if len(page) == limit else ""
        return review_pb2.ListPendingReviewsResponse(
            entries=[pending_entry_to_pb(entry) for entry in page],
            next_page_token=token,
            total_size=listing.total_size,
        )

    async def GetCaller(self, request: review_pb2.GetCallerRequest, context: Context) -> review_pb2.GetCallerResponse:
        """Return the authenticated caller and its roles, as this server's admission saw them."""
        return caller_to_pb(current_principal())


def _reader() -> Reader:
    """The caller as a reader of the inbox: a reviewer who is not an operator sees, of the reviews under a
    rule, the ones they may decide now; anyone else sees every review."""
    caller = current_principal()
    sees_all = Role.REVIEWER not in caller.roles or Role.OPERATOR in caller.roles
    return Reader(caller.name, caller.groups, sees_all)


def _page_token(operation_changed_at: datetime, operation_id: OperationId, listing: str = "operations") -> str:
    return page_tokens.encode(listing, operation_changed_at.isoformat(), operation_id)


def _inbox_token(key: InboxKey) -> str:
    return page_tokens.encode(
        PENDING_LISTING, key.rank, key.moment.isoformat(), key.pending_since.isoformat(), key.operation_id
    )


def _parse_inbox_token(token: str) -> InboxKey | None:
    """Return the place in the inbox's order a ListPendingReviews token resumes after; None for no token."""
    if not token:
        return None
    try:
        rank, moment, since, operation_id = page_tokens.decode(PENDING_LISTING, token, 4)
        if not isinstance(rank, int) or isinstance(rank, bool) or rank not in (0, 1, 2):
            raise ValueError("page token names no rank of the inbox's order")
        if not isinstance(moment, str) or not isinstance(since, str):
            raise ValueError("page token times are not text")
        if not isinstance(operation_id, str) or not is_operation_id(operation_id):
            raise ValueError("page token names no operation id")
        times = datetime.fromisoformat(moment), datetime.fromisoformat(since)
        if any(at.utcoffset() is None for at in times):
            raise ValueError("page token time has no UTC offset")  # issued tokens always carry one
        return InboxKey(rank, times[0], times[1], OperationId(operation_id))
    except (ValueError, TypeError) as exc:
        raise InvalidRequest([FieldViolation("page_token", "not a token from a previous response")]) from exc


def _parse_page_token(token: str, listing: str = "operations") -> tuple[datetime, OperationId] | None:
    """Return the (time, operation id) position a token of listing resumes after; None for no token."""
    if not token:
        return None
    try:
        at, operation_id = page_tokens.decode(listing, token, 2)
        if not isinstance(at, str) or not isinstance(operation_id, str) or not is_operation_id(operation_id):
            raise ValueError("page token names no operation id")  # a NUL in it fails on PostgreSQL
        changed_at = datetime.fromisoformat(at)
        if changed_at.utcoffset() is None:
            raise ValueError("page token time has no UTC offset")  # issued tokens always carry one
        return changed_at, OperationId(operation_id)
    except (ValueError, TypeError) as exc:
        raise InvalidRequest([FieldViolation("page_token", "not a token from a previous response")]) from exc


def _time(field: str, stamp: Timestamp) -> datetime:
    try:
        return from_timestamp(stamp)
    except (ValueError, OverflowError) as exc:
        raise InvalidRequest([FieldViolation(field, "not a valid time (years 1 to 9999)")]) from exc


def _settlement(field: str, message: operations_pb2.Settlement, now: datetime) -> Settlement:
    """Return the validated settlement at field (``settlement`` or ``settlements[i]``)."""
    if "\x00" in message.error:
        raise InvalidRequest([FieldViolation(f"{field}.error", "contains a NUL character")])
    status = enum_from_pb(f"{field}.status", message.status, LOOKUP_FROM_PB)
    consistency = enum_from_pb(f"{field}.consistency", message.consistency, CONSISTENCY_FROM_PB)
    # The receipt's id and time, checked here; the receipt is made once the operation id is checked below.
    applied: tuple[str, datetime] | None = None
    if status is LookupStatus.APPLIED:
        if not message.HasField("receipt") or not message.receipt.receipt_id:
            raise InvalidRequest([FieldViolation(f"{field}.receipt", "required when status is APPLIED")])
        if message.receipt.operation_id and message.receipt.operation_id != message.operation_id:
            raise InvalidRequest([FieldViolation(f"{field}.receipt.operation_id", "names another operation")])
        receipt_id = message.receipt.receipt_id
        if len(receipt_id) > MAX_RECEIPT_ID_CHARS or not receipt_id.isprintable():
            description = f"must be 1 to {MAX_RECEIPT_ID_CHARS} printable characters"
            raise InvalidRequest([FieldViolation(f"{field}.receipt.receipt_id", description)])
        applied = receipt_id, _time(f"{field}.receipt.applied_at", message.receipt.applied_at)
    looked_up_at = _time(f"{field}.observed_at", message.observed_at) if message.HasField("observed_at") else now
    operation_id = check_operation_id(message.operation_id, f"{field}.operation_id")
    receipt = None if applied is None else Receipt(applied[0], operation_id, applied[1])
    return Settlement(operation_id, status, consistency, receipt, message.error[:2000], looked_up_at)


class OperationsServicer(operations_pb2_grpc.OperationsServiceServicer):
    """decisionflow.v1.OperationsService: the reconciler's view of open operations."""

    def __init__(self, service: OrchestratorService, clock: Any) -> None:
        self._operations = service.operations
        self._clock = clock

    async def ListOperations(
        self, request: operations_pb2.ListOperationsRequest, context: Context
    ) -> operations_pb2.ListOperationsResponse:
        """List operations by state, age and (when case_id is set) case, oldest first."""
        if request.page_size < 0 or request.page_size > MAX_PAGE:
            raise InvalidRequest([FieldViolation("page_size", f"must be 0 to {MAX_PAGE}")])
        states = []
        for i, value in enumerate(request.states):
            state = enum_from_pb(f"states[{i}]", value, STATE_FROM_PB)
            # A state listed twice is one state; the repeats would otherwise reach the query as
            # bind parameters, and a flood of them exceeds the database's limit (UNAVAILABLE).
            if state not in states:
                states.append(state)
        if not states:
            states = [OperationState.APPROVED, OperationState.UNKNOWN]
        try:
            min_age = request.min_age.ToTimedelta() if request.HasField("min_age") else timedelta(0)
        except (ValueError, OverflowError) as exc:
            raise InvalidRequest([FieldViolation("min_age", "not a valid duration")]) from exc
        if min_age < timedelta(0) or min_age > MAX_MIN_AGE:
            # Beyond the bound, now - min_age would fall outside the dates the database can hold.
            raise InvalidRequest([FieldViolation("min_age", "must be 0 to 100 years")])
        # Set but empty is refused with the other bad shapes: only an unset field means every case.
        case_id = check_case_id(request.case_id) if request.HasField("case_id") else None
        limit = request.page_size or DEFAULT_PAGE
        after = _parse_page_token(request.page_token)
        listing = await self._operations.list_operations(
            states, min_age, limit, after, case_id=case_id, counted=request.include_total_size
        )
        page = listing.rows
        token = _page_token(page[-1].state_changed_at, page[-1].operation_id) if len(page) == limit else ""
        return operations_pb2.ListOperationsResponse(
            operations=[operation_to_pb(op) for op in page], next_page_token=token, total_size=listing.total_size
        )

    async def _settle(
        self, messages: list[operations_pb2.Settlement], fields: list[str]
    ) -> list[operations_pb2.SettleOperationResponse]:
        now = self._clock()
        # Every settlement is checked before any is recorded: one bad item refuses the whole call.
        settlements = [_settlement(field, m, now) for field, m in zip(fields, messages, strict=True)]
        results = await self._operations.settle(settlements, current_principal().name)
        out = []
        for settlement, (operation, settled) in zip(settlements, results, strict=True):
            if operation is None:
                raise errors.NotFound("operation", settlement.operation_id)
            out.append(settle_result_to_pb(operation, settled))
        return out

    async def SettleOperation(
        self, request: operations_pb2.SettleOperationRequest, context: Context
    ) -> operations_pb2.SettleOperationResponse:
        """Record what one lookup showed."""
        if not request.HasField("settlement"):
            raise InvalidRequest([FieldViolation("settlement", "required")])
        (result,) = await self._settle([request.settlement], ["settlement"])
        return result

    async def BatchSettleOperations(
        self, request: operations_pb2.BatchSettleOperationsRequest, context: Context
    ) -> operations_pb2.BatchSettleOperationsResponse:
        """Record many lookups in one transaction."""
        if not 1 <= len(request.settlements) <= MAX_BATCH:
            raise InvalidRequest([FieldViolation("settlements", f"must hold 1 to {MAX_BATCH} items")])
        fields = [f"settlements[{i}]" for i in range(len(request.settlements))]
        results = await self._settle(list(request.settlements), fields)
        return operations_pb2.BatchSettleOperationsResponse(results=results)

    async def RedriveOperation(
        self, request: operations_pb2.RedriveOperationRequest, context: Context
    ) -> operations_pb2.RedriveOperationResponse:
        """Call Apply again with the same key and the stored payload."""
        result = await self._operations.redrive(
            check_operation_id(request.operation_id), _deadline(context), _reply_by(context)
        )
        return operations_pb2.RedriveOperationResponse(
            operation=operation_to_pb(result.operation), outcome=wire.outcome_to_pb(result.outcome)
        )
