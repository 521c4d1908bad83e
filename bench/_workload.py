"""The messages the benchmark sends: realistic proposals (a 2 KB body), the Apply payloads the orchestrator
builds for them, and canned replies of the same sizes for the bare baseline chain."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from decisionflow.identity import EvidenceItem, PolicyRef, identities
from decisionflow.timestamps import to_timestamp
from decisionflow.v1 import common_pb2, effect_receiver_pb2, review_pb2
from decisionflow.vocabulary import CaseId, Decision, OperationId, OperationState, Receipt
from orchestrator.domain import Operation, Proposal, ProposalContent, RecordedDecision, effect_payload
from orchestrator.wire import operation_to_pb

ACTION = "record_support_review"
REVIEWER = "anonymous"  # the principal of an unauthenticated loopback server
BODY_BYTES = 2048
EVIDENCE = (
    EvidenceItem("HOLD-7", 2, "Firmware 4.2.0 may hold the update screen."),
    EvidenceItem("KB-12", 1, "Update to 4.2.1."),
)
POLICY = PolicyRef("support-replies", "2026-10", 9, {})

_OPENING = (
    "Thanks for the report. This is a known firmware issue (HOLD-7); please update to 4.2.1 and send us the "
    "diagnostic export if it happens again. "
)


def body(tag: str, size: int = BODY_BYTES) -> str:
    """Return a support reply of exactly size ASCII bytes, made unique by tag."""
    head = f"[{tag}] {_OPENING}"
    filler = "The export is under Settings > Diagnostics; it holds no personal data. "
    text = head + filler * (size // len(filler) + 1)
    return text[:size]


def case_id(tag: str) -> str:
    """Return the case id of a benchmark proposal."""
    return f"B-{tag}"


def start_review_request(tag: str) -> review_pb2.StartReviewRequest:
    """Return a StartReview request for a fresh case with a 2 KB body."""
    return review_pb2.StartReviewRequest(
        case_id=case_id(tag),
        action=ACTION,
        body=body(tag),
        evidence=[
            common_pb2.Evidence(source_id=e.source_id, version=e.version, quotation=e.quotation) for e in EVIDENCE
        ],
        policy=common_pb2.Policy(
            name=POLICY.name,
            version_label=POLICY.version_label,
            allowance_units=POLICY.allowance_units,
            rules=dict(POLICY.rules),
        ),
    )


def proposal(tag: str, now: datetime) -> Proposal:
    """Return the proposal start_review_request(tag) creates, as the orchestrator stores it."""
    content = ProposalContent(CaseId(case_id(tag)), ACTION, body(tag), EVIDENCE, POLICY)
    ids = identities(content.case_id, content.action, content.body, content.evidence, content.policy)
    return Proposal(
        ids.operation_id, content, ids.evidence_id, ids.policy_id, False, None, REVIEWER, now, frozenset({REVIEWER})
    )


def apply_request(tag: str, now: datetime) -> effect_receiver_pb2.ApplyRequest:
    """Return the Apply request the orchestrator sends when proposal(tag) is approved at now."""
    approved = proposal(tag, now)
    decided = RecordedDecision(approved.operation_id, Decision.APPROVE, REVIEWER, now)
    payload, digest = effect_payload(approved, decided)
    return effect_receiver_pb2.ApplyRequest(
        operation_id=approved.operation_id,
        case_id=approved.case_id,
        kind=ACTION,
        payload=payload,
        payload_digest=digest,
    )


_SAMPLE_TIME = datetime(2026, 10, 1, 12, 0, 0, 123456, tzinfo=UTC)
_SAMPLE_RECEIPT = "rcpt-" + hashlib.sha256(b"bench").hexdigest()[:32]


def sample_apply_request() -> effect_receiver_pb2.ApplyRequest:
    """An Apply request of the size the orchestrator sends (baseline chain, hop two)."""
    return apply_request("baseline-0000000", _SAMPLE_TIME)


def sample_apply_response() -> effect_receiver_pb2.ApplyResponse:
    """An Apply response of the size the receiver returns for a new effect."""
    operation_id = sample_apply_request().operation_id
    return effect_receiver_pb2.ApplyResponse(
        result=effect_receiver_pb2.APPLY_RESULT_CREATED,
        receipt=common_pb2.Receipt(receipt_id=_SAMPLE_RECEIPT, operation_id=operation_id, applied_at=_stamp()),
    )


def sample_approve_request() -> review_pb2.ApproveRequest:
    """An Approve request (baseline chain, hop one)."""
    return review_pb2.ApproveRequest(
        operation_id=sample_apply_request().operation_id, decision=common_pb2.DECISION_APPROVE
    )


def sample_approve_response() -> review_pb2.ApproveResponse:
    """An Approve response of the size the orchestrator returns for a committed first approval."""
    request = sample_apply_request()
    operation = Operation(
        operation_id=OperationId(request.operation_id),
        case_id=CaseId(request.case_id),
        state=OperationState.COMMITTED,
        state_changed_at=_SAMPLE_TIME,
        decision=RecordedDecision(OperationId(request.operation_id), Decision.APPROVE, REVIEWER, _SAMPLE_TIME),
        attempts=1,
        first_attempt_at=_SAMPLE_TIME,
        receipt=Receipt(_SAMPLE_RECEIPT, OperationId(request.operation_id), _SAMPLE_TIME),
        rejection_reason=None,
        last_lookup=None,
        payload=request.payload,
        payload_digest=request.payload_digest,
    )
    return review_pb2.ApproveResponse(
        operation=operation_to_pb(operation), outcome=common_pb2.OUTCOME_COMMITTED, replay=False
    )


def _stamp() -> Timestamp:
    return to_timestamp(_SAMPLE_TIME)
