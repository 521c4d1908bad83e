"""pb2 messages to client views and back; nothing else lives here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from decisionflow import vocabulary_wire as wire
from decisionflow.client import views
from decisionflow.identity import EvidenceItem, PolicyRef
from decisionflow.timestamps import from_timestamp, to_timestamp
from decisionflow.v1 import common_pb2, effect_receiver_pb2, operations_pb2, review_pb2


def _time(message: Any, field: str) -> datetime | None:
    if not message.HasField(field):
        return None
    stamp: timestamp_pb2.Timestamp = getattr(message, field)
    return from_timestamp(stamp)


def _retention(message: Any) -> timedelta | None:
    if not message.HasField("key_retention"):
        return None
    retention: duration_pb2.Duration = message.key_retention
    return retention.ToTimedelta()


def _optional_receipt(parent: Any) -> views.Receipt | None:
    return wire.receipt_from_pb(parent.receipt) if parent.HasField("receipt") else None


def _attempt_lease(message: review_pb2.Operation) -> views.AttemptLease | None:
    if not message.HasField("attempt_lease"):
        return None
    return views.AttemptLease(message.attempt_lease.holder, _time(message.attempt_lease, "expires_at"))


def operation(message: review_pb2.Operation) -> views.OperationView:
    """Return the view of an operation."""
    last_lookup = None
    if message.HasField("last_lookup"):
        note = message.last_lookup
        last_lookup = views.LookupNote(
            looked_up_at=_time(note, "looked_up_at"),
            status=wire.lookup_status_from_pb(note.status),
            consistency=wire.consistency_from_pb(note.consistency),
            error=note.error,
        )
    return views.OperationView(
        operation_id=message.operation_id,
        case_id=message.case_id,
        state=wire.state_from_pb(message.state),
        decision=wire.decision_from_pb(message.decision),
        reviewer=message.reviewer,
        decided_at=_time(message, "decided_at"),
        receipt=_optional_receipt(message),
        attempts=message.attempts,
        first_attempt_at=_time(message, "first_attempt_at"),
        rejection_reason=message.rejection_reason,
        last_lookup=last_lookup,
        updated_at=_time(message, "updated_at"),
        attempt_lease=_attempt_lease(message),
        progress=_progress(message),
    )


def _progress(message: review_pb2.Operation | review_pb2.PendingReview) -> views.ReviewProgress | None:
    if not message.HasField("progress"):
        return None
    progress = message.progress
    return views.ReviewProgress(
        stage_index=progress.stage_index,
        stage_name=progress.stage_name,
        stage_count=progress.stage_count,
        approvals_given=tuple(progress.approvals_given),
        approvals_needed=progress.approvals_needed,
        eligible_groups=tuple(progress.eligible_groups),
        due_time=_time(progress, "due_time"),
        escalated=progress.escalated,
        deadline=_time(progress, "deadline"),
        stages=tuple(_stage_tally(stage) for stage in progress.stages),
    )


def _stage_tally(stage: review_pb2.StageTally) -> views.StageTally:
    return views.StageTally(
        stage_index=stage.stage_index,
        stage_name=stage.stage_name,
        approvals_given=tuple(stage.approvals_given),
        approvals_needed=stage.approvals_needed,
        declines=tuple(stage.declines),
        declines_to_end=stage.declines_to_end,
        started_at=_time(stage, "started_at"),
        due_time=_time(stage, "due_time"),
        escalated_at=_time(stage, "escalated_at"),
        ended_at=_time(stage, "ended_at"),
    )


def evidence_to_pb(evidence: Sequence[EvidenceItem]) -> list[common_pb2.Evidence]:
    """Return the wire form of a list of sources."""
    return [common_pb2.Evidence(source_id=e.source_id, version=e.version, quotation=e.quotation) for e in evidence]


def policy_to_pb(policy: PolicyRef) -> common_pb2.Policy:
    """Return the wire form of a policy."""
    return common_pb2.Policy(
        name=policy.name,
        version_label=policy.version_label,
        allowance_units=policy.allowance_units,
        rules=dict(policy.rules),
    )


def _policy(message: common_pb2.Policy) -> PolicyRef:
    rules: Mapping[str, str] = dict(message.rules)
    return PolicyRef(message.name, message.version_label, message.allowance_units, rules)


def proposal(message: review_pb2.Proposal) -> views.ProposalView:
    """Return the view of a proposal."""
    return views.ProposalView(
        operation_id=message.operation_id,
        case_id=message.case_id,
        action=message.action,
        body=message.body,
        evidence=tuple(EvidenceItem(e.source_id, e.version, e.quotation) for e in message.evidence),
        evidence_id=message.evidence_id,
        policy=_policy(message.policy),
        policy_id=message.policy_id,
        human_edited=message.human_edited,
        parent_operation_id=message.parent_operation_id,
        created_by=message.created_by,
        created_at=_time(message, "created_at"),
        current=message.current,
    )


def pending_review(message: review_pb2.PendingReview) -> views.PendingReviewView:
    """Return the view of a pending review."""
    return views.PendingReviewView(
        operation_id=message.operation_id,
        workflow_name=message.workflow_name,
        workflow_version=message.workflow_version,
        graph_signature=message.graph_signature,
        checkpoint_id=message.checkpoint_id,
        created_at=_time(message, "created_at"),
        progress=_progress(message),
    )


def pending_review_page(message: review_pb2.ListPendingReviewsResponse) -> views.PendingReviewPage:
    """Return the view of a page of pending reviews."""
    entries = tuple(
        views.PendingReviewEntry(proposal(e.proposal), e.versions, pending_review(e.pending_review))
        for e in message.entries
    )
    total = message.total_size if message.HasField("total_size") else None
    return views.PendingReviewPage(entries, message.next_page_token, total)


def caller(message: review_pb2.GetCallerResponse) -> views.Caller:
    """Return the caller of a GetCaller answer (a role this client does not know is left out)."""
    return views.Caller(message.principal, wire.roles_from_pb(message.roles), frozenset(message.groups))


def applied_effect(message: effect_receiver_pb2.ApplyResponse) -> views.AppliedEffect:
    """Return the view of an Apply response."""
    return views.AppliedEffect(
        wire.apply_result_from_pb(message.result), wire.receipt_from_pb(message.receipt), _retention(message)
    )


def lookup_answer(message: effect_receiver_pb2.LookupResult) -> views.LookupAnswer:
    """Return the view of one lookup result."""
    return views.LookupAnswer(
        operation_id=message.operation_id,
        status=wire.lookup_status_from_pb(message.status),
        receipt=_optional_receipt(message),
        consistency=wire.consistency_from_pb(message.consistency),
        observed_at=_time(message, "observed_at"),
    )


def lookup_batch(message: effect_receiver_pb2.BatchLookupResponse) -> views.LookupBatch:
    """Return the view of a batch lookup response."""
    return views.LookupBatch(tuple(lookup_answer(r) for r in message.results), _retention(message))


def effect(message: effect_receiver_pb2.Effect) -> views.EffectRecord:
    """Return the view of a written effect."""
    return views.EffectRecord(
        operation_id=message.operation_id,
        case_id=message.case_id,
        kind=message.kind,
        payload_digest=message.payload_digest,
        receipt=wire.receipt_from_pb(message.receipt),
        reviewer=message.reviewer,
        body=message.body,
    )


def settlement_to_pb(settlement: views.Settlement) -> operations_pb2.Settlement:
    """Return the wire form of a settlement."""
    message = operations_pb2.Settlement(
        operation_id=settlement.operation_id,
        status=wire.lookup_status_to_pb(settlement.status),
        consistency=wire.consistency_to_pb(settlement.consistency),
        error=settlement.error,
    )
    if settlement.receipt is not None:
        message.receipt.CopyFrom(wire.receipt_to_pb(settlement.receipt))
    if settlement.observed_at is not None:
        message.observed_at.CopyFrom(to_timestamp(settlement.observed_at))
    return message


def settle_result(message: operations_pb2.SettleOperationResponse) -> views.SettleResult:
    """Return the view of a settle response."""
    return views.SettleResult(operation(message.operation), message.settled)
