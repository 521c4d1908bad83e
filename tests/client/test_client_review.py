"""ReviewClient against a scripted ReviewService: requests, deadlines, retries, typed errors, views."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf import timestamp_pb2

from decisionflow import reasons
from decisionflow.channels import insecure_channel
from decisionflow.client import (
    CallRateExceeded,
    ContentBudgetExceeded,
    DeadlineExceeded,
    Decision,
    DecisionConflict,
    EvidenceItem,
    InvalidRequest,
    OperationState,
    Outcome,
    PolicyRef,
    ReviewClient,
    StaleProposal,
    Unavailable,
    errors,
)
from decisionflow.identity import identities
from decisionflow.retry import CLIENT_DEFAULT, RetryPolicy
from decisionflow.timestamps import to_timestamp
from decisionflow.v1 import common_pb2, review_pb2
from decisionflow_server.foundation.errors import DomainError, FieldViolation
from decisionflow_server.foundation.errors import InvalidRequest as InvalidRequestRefusal
from decisionflow_server.foundation.errors import Unavailable as DatabaseUnavailable
from orchestrator.errors import CallRateExceeded as CallRateRefusal
from orchestrator.errors import ContentBudgetExceeded as ContentBudgetRefusal

from .client_standin import Fail, FakeClock, Sleeps, StandIn, standin

CASE = "T-1042"
ACTION = "record_support_review"
BODY = "This is a known firmware issue.\r\nVersion 4.2.1 fixes it."
EVIDENCE = (EvidenceItem("kb-firmware-421", 3, "Fixed in 4.2.1."),)
POLICY = PolicyRef("support-replies", "2026-10", 0, {"tone": "plain"})
OP = identities(CASE, ACTION, "This is a known firmware issue.\nVersion 4.2.1 fixes it.", EVIDENCE, POLICY).operation_id
OTHER = "op-v1-" + "9" * 64
DECIDED_AT = datetime(2026, 10, 1, 12, 30, tzinfo=UTC)
SLACK = 0.05  # the grpc-timeout header is rounded up, so the server may see a little more


class Refusal(DomainError):
    """A server-side refusal with a reason and metadata."""

    def __init__(self, reason: str, metadata: dict[str, str] | None = None) -> None:
        super().__init__(f"refused: {reason}", metadata=metadata)
        self.reason = reason


def stamp(when: datetime) -> timestamp_pb2.Timestamp:
    return to_timestamp(when)


def operation_pb(
    state: common_pb2.OperationState.ValueType = common_pb2.OPERATION_STATE_COMMITTED,
) -> review_pb2.Operation:
    return review_pb2.Operation(
        operation_id=OP,
        case_id=CASE,
        state=state,
        decision=common_pb2.DECISION_APPROVE,
        reviewer="alice",
        decided_at=stamp(DECIDED_AT),
        receipt=common_pb2.Receipt(receipt_id="rcpt-1", operation_id=OP, applied_at=stamp(DECIDED_AT)),
        attempts=2,
        last_lookup=review_pb2.LookupNote(
            looked_up_at=stamp(DECIDED_AT),
            status=common_pb2.LOOKUP_STATUS_APPLIED,
            consistency=common_pb2.CONSISTENCY_STRONG,
        ),
    )


def approved(
    outcome: common_pb2.Outcome.ValueType = common_pb2.OUTCOME_COMMITTED, replay: bool = False
) -> review_pb2.ApproveResponse:
    return review_pb2.ApproveResponse(operation=operation_pb(), outcome=outcome, replay=replay)


@pytest.fixture
def server() -> Iterator[StandIn]:
    with standin() as running:
        yield running


@pytest.fixture
def channel(server: StandIn) -> Iterator[grpc.Channel]:
    with insecure_channel(server.target) as ch:
        yield ch


def test_start_review_sends_the_content_and_returns_views(server: StandIn, channel: grpc.Channel) -> None:
    def started(request: review_pb2.StartReviewRequest) -> review_pb2.StartReviewResponse:
        proposal = review_pb2.Proposal(
            operation_id=OP,
            case_id=request.case_id,
            action=request.action,
            body=request.body.replace("\r\n", "\n"),
            evidence=request.evidence,
            policy=request.policy,
            current=True,
            created_at=stamp(DECIDED_AT),
        )
        pending = review_pb2.PendingReview(operation_id=OP, workflow_name="review", checkpoint_id="cp-1")
        return review_pb2.StartReviewResponse(proposal=proposal, created=True, pending_review=pending)

    server.script.answer("StartReview", started)
    client = ReviewClient(channel, timeout=3.0, metadata=[("authorization", "Bearer author")])

    result = client.start_review(CASE, ACTION, BODY, EVIDENCE, POLICY)

    (call,) = server.script.calls("StartReview")
    assert call.request.case_id == CASE
    assert call.request.body == BODY
    assert [(e.source_id, e.version, e.quotation) for e in call.request.evidence] == [
        ("kb-firmware-421", 3, "Fixed in 4.2.1.")
    ]
    assert dict(call.request.policy.rules) == {"tone": "plain"}
    assert call.metadata["authorization"] == "Bearer author"
    assert call.time_remaining is not None
    assert 0 < call.time_remaining <= 3.0 + SLACK
    assert result.created is True
    assert result.proposal.operation_id == OP
    assert result.proposal.evidence == EVIDENCE
    assert result.proposal.policy == POLICY
    assert result.proposal.created_at == DECIDED_AT
    assert result.pending_review.checkpoint_id == "cp-1"


def test_every_method_sends_a_deadline(server: StandIn, channel: grpc.Channel) -> None:
    server.script.answer("GetProposal", review_pb2.GetProposalResponse(operation=operation_pb()))
    client = ReviewClient(channel, timeout=2.0)

    client.start_review(CASE, ACTION, BODY, EVIDENCE, POLICY)
    client.get_proposal(case_id=CASE)
    client.edit_proposal(OP, BODY, EVIDENCE, POLICY)
    client.approve(OP)
    client.decline(OP)
    client.get_operation(OP)

    for method in ("StartReview", "GetProposal", "EditProposal", "Approve", "GetOperation"):
        for call in server.script.calls(method):
            assert call.time_remaining is not None, method
            assert 0 < call.time_remaining <= 2.0 + SLACK, method


def test_approve_is_retried_with_the_same_operation_id_until_answered(server: StandIn, channel: grpc.Channel) -> None:
    server.script.then(
        "Approve",
        Fail(grpc.StatusCode.UNAVAILABLE),
        Fail(grpc.StatusCode.DEADLINE_EXCEEDED),
        Fail(grpc.StatusCode.RESOURCE_EXHAUSTED),
        approved(replay=True),
    )
    sleeps = Sleeps()

    result = ReviewClient(channel, sleep=sleeps).approve(OP)

    calls = server.script.calls("Approve")
    assert len(calls) == 4
    assert {(c.request.operation_id, c.request.decision) for c in calls} == {(OP, common_pb2.DECISION_APPROVE)}
    assert all(c.time_remaining is not None for c in calls)
    assert len(sleeps.waits) == 3
    for n, wait in enumerate(sleeps.waits, start=1):
        assert 0 <= wait <= CLIENT_DEFAULT.window(n) <= CLIENT_DEFAULT.max_backoff
    assert sleeps.waits[2] >= CLIENT_DEFAULT.window(3) / 2  # after RESOURCE_EXHAUSTED: a real back-off
    assert result.outcome is Outcome.COMMITTED
    assert result.replay is True
    assert result.operation.receipt_id == "rcpt-1"


class SlowDown(DomainError):
    """A server-side refusal that names when to come back (google.rpc.RetryInfo)."""

    reason = "SLOW_DOWN"

    def __init__(self, delay: timedelta) -> None:
        super().__init__("slow down", retry_after=delay)


def test_a_refusals_retry_delay_is_waited_before_the_retry_and_reported_when_it_outlasts_the_call(
    server: StandIn, channel: grpc.Channel
) -> None:
    server.script.then(
        "Approve",
        Fail(grpc.StatusCode.RESOURCE_EXHAUSTED, SlowDown(timedelta(milliseconds=1500))),
        Fail(grpc.StatusCode.RESOURCE_EXHAUSTED, SlowDown(timedelta(seconds=30))),
        approved(),
    )
    clock = FakeClock()
    sleeps = Sleeps(clock)

    with pytest.raises(Unavailable) as raised:
        ReviewClient(channel, sleep=sleeps, clock=clock).approve(OP)

    # The first wait is the server's 1.5 s, not the 0.1 s window; 30 s more would outlast the call's 10 s.
    assert sleeps.waits == [1.5]
    assert len(server.script.calls("Approve")) == 2
    assert (raised.value.reason, raised.value.retry_after, raised.value.attempts) == ("SLOW_DOWN", 30.0, 2)


def test_a_database_outages_retry_delay_is_waited_before_the_retry(server: StandIn, channel: grpc.Channel) -> None:
    outage = DatabaseUnavailable(
        "orchestrator database unavailable: the database cannot answer", retry_after=timedelta(milliseconds=1500)
    )
    server.script.then("Approve", Fail(grpc.StatusCode.UNAVAILABLE, outage), approved())
    clock = FakeClock()
    sleeps = Sleeps(clock)

    result = ReviewClient(channel, sleep=sleeps, clock=clock).approve(OP)

    assert result.outcome is Outcome.COMMITTED
    assert sleeps.waits == [1.5]  # the first window is 0.1 s: the server's delay is the longer


def started_review() -> review_pb2.StartReviewResponse:
    """A StartReview answer: the proposal OP, created, with its pending review."""
    proposal = review_pb2.Proposal(operation_id=OP, case_id=CASE, action=ACTION, current=True)
    pending = review_pb2.PendingReview(operation_id=OP, workflow_name="review", checkpoint_id="cp-1")
    return review_pb2.StartReviewResponse(proposal=proposal, created=True, pending_review=pending)


def test_a_spent_budget_is_retried_no_sooner_than_the_delay_the_server_names(
    server: StandIn, channel: grpc.Channel
) -> None:
    refusal = CallRateRefusal("arthur", timedelta(milliseconds=1500))
    server.script.then("StartReview", Fail(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal), started_review())
    clock = FakeClock()
    sleeps = Sleeps(clock)

    result = ReviewClient(channel, sleep=sleeps, clock=clock).start_review(CASE, ACTION, BODY, EVIDENCE, POLICY)

    assert result.created is True
    assert len(server.script.calls("StartReview")) == 2
    assert sleeps.waits == [1.5]  # the first window is 0.1 s: the server's delay is the longer


def test_a_delay_beyond_the_calls_time_ends_it_at_once_with_the_delay_to_wait(
    server: StandIn, channel: grpc.Channel
) -> None:
    refusal = CallRateRefusal("arthur", timedelta(seconds=30))
    server.script.then("StartReview", Fail(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal), started_review())
    clock = FakeClock()
    sleeps = Sleeps(clock)

    with pytest.raises(CallRateExceeded) as raised:
        ReviewClient(channel, sleep=sleeps, clock=clock).start_review(CASE, ACTION, BODY, EVIDENCE, POLICY)

    assert sleeps.waits == []
    assert len(server.script.calls("StartReview")) == 1
    error = raised.value
    assert (error.retry_after, error.principal, error.attempts, error.definite) == (30.0, "arthur", 1, True)
    assert error.metadata[reasons.RETRY_AFTER] == "30.000s"


def test_a_budget_still_spent_after_the_retries_is_raised_and_no_longer_definite(
    server: StandIn, channel: grpc.Channel
) -> None:
    refusal = ContentBudgetRefusal("arthur", timedelta(seconds=2), 366869)
    server.script.then("StartReview", *[Fail(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)] * 2)
    clock = FakeClock()
    sleeps = Sleeps(clock)
    policy = dataclasses.replace(CLIENT_DEFAULT, name="two_tries", max_attempts=2)

    with pytest.raises(ContentBudgetExceeded) as raised:
        ReviewClient(channel, sleep=sleeps, clock=clock, policy=policy).start_review(
            CASE, ACTION, BODY, EVIDENCE, POLICY
        )

    assert sleeps.waits == [2.0]
    error = raised.value
    # An earlier attempt of the call might have acted, as far as the client can tell: not definite.
    assert (error.attempts, error.definite, error.retry_after, error.content_bytes) == (2, False, 2.0, 366869)


def test_an_unknown_outcome_is_returned_not_raised(server: StandIn, channel: grpc.Channel) -> None:
    server.script.answer("Approve", approved(outcome=common_pb2.OUTCOME_UNKNOWN))

    result = ReviewClient(channel).approve(OP)

    assert result.outcome is Outcome.UNKNOWN


def test_an_unset_outcome_is_reported_as_unknown_never_as_success(server: StandIn, channel: grpc.Channel) -> None:
    server.script.answer("Approve", review_pb2.ApproveResponse(operation=operation_pb()))

    assert ReviewClient(channel).approve(OP).outcome is Outcome.UNKNOWN


def test_decline_and_decide_send_the_decision(server: StandIn, channel: grpc.Channel) -> None:
    server.script.answer("Approve", approved(outcome=common_pb2.OUTCOME_DECLINED))
    client = ReviewClient(channel)

    assert client.decline(OP).outcome is Outcome.DECLINED
    client.decide(OP, Decision.APPROVE)

    assert [c.request.decision for c in server.script.calls("Approve")] == [
        common_pb2.DECISION_DECLINE,
        common_pb2.DECISION_APPROVE,
    ]


def test_an_omitted_decision_is_refused_once_with_its_violations(server: StandIn, channel: grpc.Channel) -> None:
    refusal = InvalidRequestRefusal([FieldViolation("decision", "required")], reason=reasons.DECISION_REQUIRED)
    server.script.then("Approve", Fail(grpc.StatusCode.INVALID_ARGUMENT, refusal))
    sleeps = Sleeps()

    with pytest.raises(InvalidRequest) as raised:
        ReviewClient(channel, sleep=sleeps).decide(OP, Decision.UNSPECIFIED)

    assert server.script.calls("Approve")[0].request.decision == common_pb2.DECISION_UNSPECIFIED
    assert raised.value.reason == reasons.DECISION_REQUIRED
    assert raised.value.violations == (FieldViolation("decision", "required"),)
    assert len(server.script.calls("Approve")) == 1
    assert sleeps.waits == []


def test_a_stale_approval_is_refused_with_the_current_operation_id(server: StandIn, channel: grpc.Channel) -> None:
    refusal = Refusal(reasons.STALE_PROPOSAL, {reasons.CURRENT_OPERATION_ID: OTHER})
    server.script.then("Approve", Fail(grpc.StatusCode.FAILED_PRECONDITION, refusal))

    with pytest.raises(StaleProposal) as raised:
        ReviewClient(channel, sleep=Sleeps()).approve(OP)

    assert raised.value.current_operation_id == OTHER
    assert raised.value.attempts == 1
    assert raised.value.definite is True


def test_a_conflicting_decision_names_the_recorded_one(server: StandIn, channel: grpc.Channel) -> None:
    refusal = Refusal(reasons.DECISION_CONFLICT, {reasons.RECORDED_DECISION: "APPROVE"})
    server.script.then("Approve", Fail(grpc.StatusCode.ALREADY_EXISTS, refusal))

    with pytest.raises(DecisionConflict) as raised:
        ReviewClient(channel, sleep=Sleeps()).decline(OP)

    assert raised.value.recorded_decision is Decision.APPROVE
    assert len(server.script.calls("Approve")) == 1


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidRequest),
        (grpc.StatusCode.FAILED_PRECONDITION, errors.PreconditionFailed),
        (grpc.StatusCode.ALREADY_EXISTS, errors.ServerError),
        (grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDenied),
        (grpc.StatusCode.UNAUTHENTICATED, errors.Unauthenticated),
        (grpc.StatusCode.NOT_FOUND, errors.NotFound),
        (grpc.StatusCode.INTERNAL, errors.ServerError),
    ],
)
def test_refusals_are_not_retried(
    server: StandIn, channel: grpc.Channel, code: grpc.StatusCode, expected: type[errors.DecisionflowError]
) -> None:
    server.script.then("GetOperation", Fail(code))
    sleeps = Sleeps()

    with pytest.raises(expected):
        ReviewClient(channel, sleep=sleeps).get_operation(OP)

    assert len(server.script.calls("GetOperation")) == 1
    assert sleeps.waits == []


def test_retries_stop_after_max_attempts(server: StandIn, channel: grpc.Channel) -> None:
    server.script.then("Approve", *[Fail(grpc.StatusCode.UNAVAILABLE)] * 20)
    sleeps = Sleeps()

    with pytest.raises(Unavailable) as raised:
        ReviewClient(channel, sleep=sleeps).approve(OP)

    assert len(server.script.calls("Approve")) == CLIENT_DEFAULT.max_attempts
    assert raised.value.attempts == CLIENT_DEFAULT.max_attempts
    assert raised.value.definite is False
    assert len(sleeps.waits) == CLIENT_DEFAULT.max_attempts - 1


def test_a_hanging_server_ends_in_deadline_exceeded(server: StandIn, channel: grpc.Channel) -> None:
    server.script.then("Approve", Fail(grpc.StatusCode.INTERNAL, hold=5.0), Fail(grpc.StatusCode.INTERNAL, hold=5.0))
    two = RetryPolicy("test_two", 2, 10.0, initial_backoff=0.01, max_backoff=0.01, multiplier=1.0)

    # DEADLINE_EXCEEDED, not the INTERNAL the server answers once its hold ends: each attempt gave up at
    # its deadline instead of waiting the server out.
    with pytest.raises(DeadlineExceeded) as raised:
        ReviewClient(channel, timeout=0.2, policy=two, sleep=Sleeps()).approve(OP)

    assert raised.value.attempts == 2
    assert raised.value.definite is False
    assert len(server.script.calls("Approve")) == 2


def test_the_policy_total_time_cuts_each_attempt_timeout(server: StandIn, channel: grpc.Channel) -> None:
    brief = RetryPolicy("test_brief", 3, max_total_seconds=0.5, initial_backoff=0.01, max_backoff=0.01, multiplier=1.0)

    ReviewClient(channel, timeout=30.0, policy=brief).get_operation(OP)

    (call,) = server.script.calls("GetOperation")
    assert call.time_remaining is not None
    assert call.time_remaining <= 0.5 + SLACK


def test_get_operation_returns_a_view(server: StandIn, channel: grpc.Channel) -> None:
    server.script.answer("GetOperation", review_pb2.GetOperationResponse(operation=operation_pb()))

    view = ReviewClient(channel).get_operation(OP)

    assert view.operation_id == OP
    assert view.state is OperationState.COMMITTED
    assert view.decision is Decision.APPROVE
    assert view.reviewer == "alice"
    assert view.decided_at == DECIDED_AT
    assert view.receipt_id == "rcpt-1"
    assert view.attempts == 2
    assert view.last_lookup is not None
    assert view.last_lookup.status == "APPLIED"
    assert view.first_attempt_at is None
    assert server.script.calls("GetOperation")[0].request.operation_id == OP


def test_states_a_newer_server_adds_read_as_unspecified(server: StandIn, channel: grpc.Channel) -> None:
    server.script.answer(
        "GetOperation",
        review_pb2.GetOperationResponse(operation=review_pb2.Operation(state=common_pb2.OperationState.ValueType(99))),
    )

    view = ReviewClient(channel).get_operation(OP)

    assert view.state is OperationState.UNSPECIFIED
    assert view.receipt is None
    assert view.receipt_id is None


def test_get_proposal_takes_exactly_one_key(server: StandIn, channel: grpc.Channel) -> None:
    client = ReviewClient(channel)
    with pytest.raises(ValueError, match="exactly one"):
        client.get_proposal()
    with pytest.raises(ValueError, match="exactly one"):
        client.get_proposal(operation_id=OP, case_id=CASE)

    client.get_proposal(case_id=CASE)
    client.get_proposal(operation_id=OP)

    sent = [(c.request.operation_id, c.request.case_id) for c in server.script.calls("GetProposal")]
    assert sent == [("", CASE), (OP, "")]


EDITED_BODY = "This is a known firmware issue.\nUpdate to 4.2.1."
EDITED_OP = identities(CASE, ACTION, EDITED_BODY, EVIDENCE, POLICY).operation_id


def edited_proposal(parent: str) -> review_pb2.GetProposalResponse:
    proposal = review_pb2.Proposal(
        operation_id=EDITED_OP,
        case_id=CASE,
        action=ACTION,
        body=EDITED_BODY,
        human_edited=True,
        parent_operation_id=parent,
        current=True,
    )
    return review_pb2.GetProposalResponse(proposal=proposal, operation=review_pb2.Operation(operation_id=EDITED_OP))


def stale(current: str) -> Fail:
    return Fail(
        grpc.StatusCode.FAILED_PRECONDITION,
        Refusal(reasons.STALE_PROPOSAL, {reasons.CURRENT_OPERATION_ID: current}),
    )


def test_a_retried_edit_recognises_its_own_success(server: StandIn, channel: grpc.Channel) -> None:
    # The first attempt's edit landed but its reply was lost; the retry is then stale against it.
    server.script.then("EditProposal", Fail(grpc.StatusCode.UNAVAILABLE), stale(EDITED_OP))
    server.script.answer("GetProposal", edited_proposal(parent=OP))

    result = ReviewClient(channel, sleep=Sleeps()).edit_proposal(OP, EDITED_BODY, EVIDENCE, POLICY)

    assert result.proposal.operation_id == EDITED_OP
    assert result.proposal.parent_operation_id == OP
    assert result.pending_review is None
    assert len(server.script.calls("EditProposal")) == 2
    assert server.script.calls("GetProposal")[0].request.operation_id == EDITED_OP


def test_a_first_attempt_stale_edit_is_raised(server: StandIn, channel: grpc.Channel) -> None:
    server.script.then("EditProposal", stale(EDITED_OP))
    server.script.answer("GetProposal", edited_proposal(parent=OP))

    with pytest.raises(StaleProposal):
        ReviewClient(channel, sleep=Sleeps()).edit_proposal(OP, EDITED_BODY, EVIDENCE, POLICY)
    assert server.script.calls("GetProposal") == []


def test_a_retried_edit_overtaken_by_another_edit_is_raised(server: StandIn, channel: grpc.Channel) -> None:
    server.script.then("EditProposal", Fail(grpc.StatusCode.UNAVAILABLE), stale(EDITED_OP))
    server.script.answer("GetProposal", edited_proposal(parent=OTHER))

    with pytest.raises(StaleProposal) as raised:
        ReviewClient(channel, sleep=Sleeps()).edit_proposal(OP, EDITED_BODY, EVIDENCE, POLICY)
    assert raised.value.current_operation_id == EDITED_OP


def test_an_edit_returns_the_new_proposal_and_its_pending_review(server: StandIn, channel: grpc.Channel) -> None:
    response = review_pb2.EditProposalResponse(
        proposal=edited_proposal(parent=OP).proposal,
        pending_review=review_pb2.PendingReview(operation_id=EDITED_OP, checkpoint_id="cp-2"),
    )
    server.script.answer("EditProposal", response)

    result = ReviewClient(channel).edit_proposal(OP, EDITED_BODY, EVIDENCE, POLICY)

    (call,) = server.script.calls("EditProposal")
    assert call.request.expected_operation_id == OP
    assert call.request.body == EDITED_BODY
    assert result.proposal.human_edited is True
    assert result.pending_review is not None
    assert result.pending_review.checkpoint_id == "cp-2"


def test_a_timeout_must_be_positive(channel: grpc.Channel) -> None:
    with pytest.raises(ValueError, match="deadline"):
        ReviewClient(channel, timeout=0)


def test_the_default_policy_cuts_a_longer_timeout_to_its_total_and_a_longer_total_lifts_it(
    server: StandIn, channel: grpc.Channel
) -> None:
    # docs/clients.md, "Retries": a timeout above 10 s is cut to 10 s by CLIENT_DEFAULT.
    ReviewClient(channel, timeout=30.0).get_operation(OP)
    long_approve = dataclasses.replace(CLIENT_DEFAULT, name="long_approve", max_total_seconds=60.0)
    ReviewClient(channel, timeout=30.0, policy=long_approve).get_operation(OP)

    cut, lifted = server.script.calls("GetOperation")
    assert cut.time_remaining is not None and lifted.time_remaining is not None
    # At 10 s the header may already be written in 100 ms units, rounded up. What passed before the server
    # read its deadline is the machine's pace, so only the cut is asserted, not how much of it was left.
    cut_at = CLIENT_DEFAULT.max_total_seconds + 0.1 + SLACK
    assert 0 < cut.time_remaining <= cut_at
    assert cut_at < lifted.time_remaining <= 30.0 * 1.01 + SLACK  # above 10 s gRPC rounds up to 100 ms
