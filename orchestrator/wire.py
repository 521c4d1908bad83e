"""Conversions between protobuf messages and orchestrator domain objects.

Requests are parsed into validated domain values here (``orchestrator.validation``), so the
service never sees an unchecked field.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TypeVar

from google.protobuf.timestamp_pb2 import Timestamp

from decisionflow import reasons
from decisionflow import vocabulary_wire as wire
from decisionflow.identity import EvidenceItem, PolicyRef
from decisionflow.review_rules import ReviewProgress, StageTally
from decisionflow.timestamps import from_timestamp, to_timestamp
from decisionflow.v1 import common_pb2, operations_pb2, review_pb2
from decisionflow.vocabulary import Consistency, Decision, LookupStatus, OperationState, Role
from decisionflow_server.foundation.errors import FieldViolation, InvalidRequest
from decisionflow_server.runtime.auth import Principal
from orchestrator.domain import Operation, PendingReview, PendingReviewEntry, Proposal, ProposalEdit, ProposalStart
from orchestrator.validation import edit_content, start_request

# The numbers a request may carry for each enum; a state is never UNSPECIFIED, while a settlement's
# UNSPECIFIED status and consistency record a failed lookup.
STATE_FROM_PB = {n: s for n, s in wire.numbers(OperationState).items() if s is not OperationState.UNSPECIFIED}
LOOKUP_FROM_PB = wire.numbers(LookupStatus)
CONSISTENCY_FROM_PB = wire.numbers(Consistency)

_Number = TypeVar("_Number", bound=int)
_Member = TypeVar("_Member")

# from_timestamp is the servicer's parser of request times; one converter serves both directions.
__all__ = ["from_timestamp", "timestamp", "to_timestamp"]


def timestamp(value: datetime | None) -> Timestamp | None:
    """Return a protobuf Timestamp for value, a naive value taken as UTC (None stays None)."""
    return None if value is None else to_timestamp(value)


def enum_from_pb(field: str, value: _Number, known: Mapping[_Number, _Member]) -> _Member:
    """Return the domain value of a request's enum field; refuse a number the proto does not define.

    Protobuf keeps an unknown enum number as it came (open enums), so a peer can send 99; taking it
    for a default would record something the sender never said.
    """
    member = known.get(value)
    if member is None:
        allowed = ", ".join(str(number) for number in sorted(known))
        raise InvalidRequest([FieldViolation(field, f"unknown value {value} (known: {allowed})")])
    return member


def evidence_from_pb(items: list[common_pb2.Evidence]) -> list[EvidenceItem]:
    """Return domain evidence for protobuf evidence."""
    return [EvidenceItem(e.source_id, e.version, e.quotation) for e in items]


def policy_from_pb(request: review_pb2.StartReviewRequest | review_pb2.EditProposalRequest) -> PolicyRef | None:
    """Return the domain policy of a request (None when the field is unset)."""
    if not request.HasField("policy"):
        return None
    p = request.policy
    return PolicyRef(p.name, p.version_label, p.allowance_units, dict(p.rules))


def start_from_pb(request: review_pb2.StartReviewRequest) -> ProposalStart:
    """Return the validated StartReview: normalised content and the proposal it replaces, if named."""
    return start_request(
        request.case_id,
        request.action,
        request.body,
        evidence_from_pb(list(request.evidence)),
        policy_from_pb(request),
        request.expected_operation_id,
    )


def edit_from_pb(request: review_pb2.EditProposalRequest) -> ProposalEdit:
    """Return the validated edit of an EditProposal request."""
    return edit_content(
        request.expected_operation_id, request.body, evidence_from_pb(list(request.evidence)), policy_from_pb(request)
    )


def decision_from_pb(value: common_pb2.Decision.ValueType) -> Decision:
    """Return the decision of an Approve request; an omitted decision is refused, never taken as consent."""
    decision = wire.decision_from_pb(value)
    if decision is Decision.UNSPECIFIED:
        if value != common_pb2.DECISION_UNSPECIFIED:
            raise InvalidRequest([FieldViolation("decision", f"unknown decision value {value}")])
        raise InvalidRequest(
            [FieldViolation("decision", "required: an omitted decision is not consent")],
            reason=reasons.DECISION_REQUIRED,
        )
    return decision


def proposal_to_pb(proposal: Proposal, current: bool) -> review_pb2.Proposal:
    """Return the protobuf form of a proposal."""
    c = proposal.content
    return review_pb2.Proposal(
        operation_id=proposal.operation_id,
        case_id=c.case_id,
        action=c.action,
        body=c.body,
        evidence=[
            common_pb2.Evidence(source_id=e.source_id, version=e.version, quotation=e.quotation) for e in c.evidence
        ],
        evidence_id=proposal.evidence_id,
        policy=common_pb2.Policy(
            name=c.policy.name,
            version_label=c.policy.version_label,
            allowance_units=c.policy.allowance_units,
            rules=dict(c.policy.rules),
        ),
        policy_id=proposal.policy_id,
        human_edited=proposal.human_edited,
        parent_operation_id=proposal.parent_operation_id or "",
        created_by=proposal.created_by,
        created_at=timestamp(proposal.created_at),
        current=current,
    )


def review_to_pb(review: PendingReview, progress: ReviewProgress | None = None) -> review_pb2.PendingReview:
    """Return the protobuf form of a pending review, with where it stands when it follows a rule."""
    message = review_pb2.PendingReview(
        operation_id=review.operation_id,
        workflow_name=review.workflow_name,
        workflow_version=review.workflow_version,
        graph_signature=review.graph_signature,
        checkpoint_id=review.checkpoint_id,
        created_at=timestamp(review.created_at),
    )
    if progress is not None:
        message.progress.CopyFrom(progress_to_pb(progress))
    return message


def pending_entry_to_pb(entry: PendingReviewEntry) -> review_pb2.PendingReviewEntry:
    """Return the protobuf form of a pending review's entry (its proposal is current by definition)."""
    return review_pb2.PendingReviewEntry(
        proposal=proposal_to_pb(entry.proposal, True),
        versions=entry.versions,
        pending_review=review_to_pb(entry.review, entry.progress),
    )


def progress_to_pb(progress: ReviewProgress) -> review_pb2.ReviewProgress:
    """Return the protobuf form of where a review under a rule stands (its current stage)."""
    tally = progress.current
    message = review_pb2.ReviewProgress(
        stage_index=tally.index,
        stage_name=tally.stage.name,
        stage_count=len(progress.rule.stages),
        approvals_given=tally.approvals,
        approvals_needed=tally.stage.approvals,
        eligible_groups=tally.eligible_groups(progress.now),
        escalated=tally.escalated_by(progress.now),
    )
    if tally.due_at is not None:
        message.due_time.CopyFrom(to_timestamp(tally.due_at))
    if progress.deadline_at is not None:
        message.deadline.CopyFrom(to_timestamp(progress.deadline_at))
    message.stages.extend(stage_tally_to_pb(begun, progress.now) for begun in progress.stages)
    return message


def stage_tally_to_pb(tally: StageTally, now: datetime) -> review_pb2.StageTally:
    """Return the protobuf form of one stage begun so far, as it stands at now."""
    stage = tally.stage
    message = review_pb2.StageTally(
        stage_index=tally.index,
        stage_name=stage.name,
        approvals_given=tally.approvals,
        approvals_needed=stage.approvals,
        declines=tally.declines,
        declines_to_end=stage.declines_to_end,
        started_at=to_timestamp(tally.started_at),
    )
    if tally.due_at is not None:
        message.due_time.CopyFrom(to_timestamp(tally.due_at))
    if tally.escalated_at is not None and tally.escalated_by(now):
        message.escalated_at.CopyFrom(to_timestamp(tally.escalated_at))
    if tally.ended_at is not None:
        message.ended_at.CopyFrom(to_timestamp(tally.ended_at))
    return message


def operation_to_pb(operation: Operation, progress: ReviewProgress | None = None) -> review_pb2.Operation:
    """Return the protobuf form of an operation, with its review's progress when it follows a rule."""
    message = review_pb2.Operation(
        operation_id=operation.operation_id,
        case_id=operation.case_id,
        state=wire.state_to_pb(operation.state),
        attempts=operation.attempts,
        rejection_reason=operation.rejection_reason or "",
        updated_at=timestamp(operation.state_changed_at),
        first_attempt_at=timestamp(operation.first_attempt_at),
        receipt=None if operation.receipt is None else wire.receipt_to_pb(operation.receipt),
    )
    if operation.decision is not None:
        message.decision = wire.decision_to_pb(operation.decision.decision)
        message.reviewer = operation.decision.reviewer
        message.decided_at.CopyFrom(to_timestamp(operation.decision.decided_at))
    if operation.attempt_lease_until is not None:
        message.attempt_lease.CopyFrom(
            review_pb2.AttemptLease(
                holder=operation.attempt_lease_holder or "", expires_at=to_timestamp(operation.attempt_lease_until)
            )
        )
    if operation.last_lookup is not None:
        lookup = operation.last_lookup
        message.last_lookup.CopyFrom(
            review_pb2.LookupNote(
                looked_up_at=timestamp(lookup.looked_up_at),
                status=wire.lookup_status_to_pb(lookup.status),
                consistency=wire.consistency_to_pb(lookup.consistency),
                error=lookup.error,
            )
        )
    if progress is not None:
        message.progress.CopyFrom(progress_to_pb(progress))
    return message


def settle_result_to_pb(operation: Operation, settled: bool) -> operations_pb2.SettleOperationResponse:
    """Return the protobuf form of one settlement's result."""
    return operations_pb2.SettleOperationResponse(operation=operation_to_pb(operation), settled=settled)


def caller_to_pb(principal: Principal) -> review_pb2.GetCallerResponse:
    """Return the GetCaller answer for principal: its name, its roles in the order of the enum and its
    groups sorted."""
    roles = [wire.role_to_pb(role) for role in Role if role in principal.roles]
    return review_pb2.GetCallerResponse(principal=principal.name, roles=roles, groups=sorted(principal.groups))
