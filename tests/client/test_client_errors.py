"""map_rpc_error: rich statuses from a real server become typed errors with their attributes; every
reason of the contract has its own class, and the services' refusals arrive with their metadata typed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import grpc
import pytest

from decisionflow import reasons
from decisionflow.channels import insecure_channel
from decisionflow.client import errors
from decisionflow.client.views import Decision, OperationState
from decisionflow.v1 import review_pb2, review_pb2_grpc
from decisionflow.vocabulary import Decision as DomainDecision
from decisionflow_server.foundation.errors import DomainError, FieldViolation, InvalidRequest
from decisionflow_server.runtime.auth import FourEyesViolation
from decisionflow_server.runtime.rpc_errors import code_for
from effect_receiver import errors as receiver_errors
from effect_receiver.grpc_api import STATUS_TABLE as RECEIVER_STATUS
from orchestrator import errors as orchestrator_errors
from orchestrator.grpc_api import STATUS_TABLE as ORCHESTRATOR_STATUS

from .client_standin import Fail, StandIn, standin

OP = "op-v1-" + "1" * 64
CURRENT = "op-v1-" + "2" * 64


class Refusal(DomainError):
    """A server-side refusal with any reason, as a service's errors.py would define it."""

    def __init__(self, reason: str, metadata: dict[str, str] | None = None) -> None:
        super().__init__(f"refused: {reason}", metadata=metadata)
        self.reason = reason


@pytest.fixture
def server() -> Iterator[StandIn]:
    with standin() as running:
        yield running


def raw_failure(server: StandIn, failure: Fail) -> grpc.RpcError:
    """Return the grpc.RpcError a plain stub raises when the server plays failure."""
    server.script.then("GetOperation", failure)
    with insecure_channel(server.target) as channel:
        try:
            review_pb2_grpc.ReviewServiceStub(channel).GetOperation(review_pb2.GetOperationRequest(), timeout=5)
        except grpc.RpcError as exc:
            return exc
    raise AssertionError("the scripted failure did not fail the call")


def test_stale_proposal_carries_the_current_operation_id(server: StandIn) -> None:
    refusal = Refusal(reasons.STALE_PROPOSAL, {reasons.OPERATION_ID: OP, reasons.CURRENT_OPERATION_ID: CURRENT})
    error = errors.map_rpc_error(raw_failure(server, Fail(grpc.StatusCode.FAILED_PRECONDITION, refusal)))

    assert isinstance(error, errors.StaleProposal)
    assert isinstance(error, errors.PreconditionFailed)
    assert error.current_operation_id == CURRENT
    assert error.code is grpc.StatusCode.FAILED_PRECONDITION
    assert error.reason == reasons.STALE_PROPOSAL
    assert error.metadata[reasons.OPERATION_ID] == OP
    assert error.definite is True
    assert "refused: STALE_PROPOSAL" in error.message


@pytest.mark.parametrize("recorded", ["DECLINE", "DECISION_DECLINE", "decline"])
def test_decision_conflict_names_the_recorded_decision(server: StandIn, recorded: str) -> None:
    refusal = Refusal(reasons.DECISION_CONFLICT, {reasons.RECORDED_DECISION: recorded})
    error = errors.map_rpc_error(raw_failure(server, Fail(grpc.StatusCode.ALREADY_EXISTS, refusal)))

    assert isinstance(error, errors.DecisionConflict)
    assert error.recorded_decision is Decision.DECLINE
    assert error.definite is True


def test_invalid_request_carries_field_violations(server: StandIn) -> None:
    refusal = InvalidRequest(
        [FieldViolation("decision", "must be APPROVE or DECLINE")], reason=reasons.DECISION_REQUIRED
    )
    error = errors.map_rpc_error(raw_failure(server, Fail(grpc.StatusCode.INVALID_ARGUMENT, refusal)))

    assert isinstance(error, errors.InvalidRequest)
    assert error.reason == reasons.DECISION_REQUIRED
    assert error.violations == (FieldViolation("decision", "must be APPROVE or DECLINE"),)
    assert error.definite is True


def test_idempotency_key_reused_names_the_key(server: StandIn) -> None:
    refusal = Refusal(reasons.IDEMPOTENCY_KEY_REUSED, {reasons.OPERATION_ID: OP})
    error = errors.map_rpc_error(raw_failure(server, Fail(grpc.StatusCode.FAILED_PRECONDITION, refusal)))

    assert isinstance(error, errors.IdempotencyKeyReused)
    assert error.operation_id == OP
    assert error.definite is True


@pytest.mark.parametrize(
    ("code", "reason", "expected", "definite"),
    [
        (grpc.StatusCode.FAILED_PRECONDITION, reasons.WORKFLOW_VERSION_MISMATCH, errors.WorkflowVersionMismatch, True),
        (grpc.StatusCode.FAILED_PRECONDITION, reasons.NOT_REDRIVABLE, errors.NotRedrivable, True),
        (grpc.StatusCode.FAILED_PRECONDITION, reasons.STALE_PROPOSAL, errors.StaleProposal, True),
        (grpc.StatusCode.FAILED_PRECONDITION, reasons.IDEMPOTENCY_KEY_REUSED, errors.IdempotencyKeyReused, True),
        # Definite for the call (nothing written); the orchestrator still takes its operation as Unknown.
        (grpc.StatusCode.FAILED_PRECONDITION, reasons.KEY_RETENTION_EXCEEDED, errors.KeyRetentionExceeded, True),
        (grpc.StatusCode.FAILED_PRECONDITION, "SOME_NEW_PRECONDITION", errors.PreconditionFailed, True),
        (grpc.StatusCode.ALREADY_EXISTS, reasons.DECISION_CONFLICT, errors.DecisionConflict, True),
        # Tampered: no retry can help, an operator must act.
        (grpc.StatusCode.DATA_LOSS, reasons.CHECKPOINT_INTEGRITY, errors.CheckpointIntegrity, True),
        (grpc.StatusCode.DATA_LOSS, "SOMETHING_ELSE", errors.ServerError, False),
        (grpc.StatusCode.NOT_FOUND, reasons.NOT_FOUND, errors.NotFound, True),
        (grpc.StatusCode.INVALID_ARGUMENT, reasons.INVALID_ARGUMENT, errors.InvalidRequest, True),
        (grpc.StatusCode.INVALID_ARGUMENT, reasons.DECISION_REQUIRED, errors.DecisionRequired, True),
        (grpc.StatusCode.PERMISSION_DENIED, reasons.PERMISSION_DENIED, errors.PermissionDenied, True),
        (grpc.StatusCode.PERMISSION_DENIED, reasons.FOUR_EYES, errors.FourEyes, True),
        (grpc.StatusCode.UNAUTHENTICATED, reasons.UNAUTHENTICATED, errors.Unauthenticated, True),
        (grpc.StatusCode.UNAVAILABLE, reasons.UNAVAILABLE, errors.Unavailable, False),
        # Nothing was recorded (orchestrator saves are checked first); retried all the same.
        (grpc.StatusCode.UNAVAILABLE, reasons.CHECKPOINT_SAVE_FAILED, errors.CheckpointSaveFailed, True),
        (grpc.StatusCode.UNAVAILABLE, reasons.REPLY_LOST, errors.ReplyLost, False),
        (grpc.StatusCode.INTERNAL, reasons.WORKFLOW_PROTOCOL, errors.WorkflowProtocolError, False),
        (grpc.StatusCode.ALREADY_EXISTS, "SOMETHING_ELSE", errors.ServerError, True),
    ],
)
def test_rich_statuses_pick_the_class_by_code_and_reason(
    server: StandIn,
    code: grpc.StatusCode,
    reason: str,
    expected: type[errors.DecisionflowError],
    definite: bool,
) -> None:
    error = errors.map_rpc_error(raw_failure(server, Fail(code, Refusal(reason))))

    assert type(error) is expected
    assert (error.code, error.reason, error.definite) == (code, reason, definite)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidRequest),
        (grpc.StatusCode.NOT_FOUND, errors.NotFound),
        (grpc.StatusCode.UNAUTHENTICATED, errors.Unauthenticated),
        (grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDenied),
        (grpc.StatusCode.FAILED_PRECONDITION, errors.PreconditionFailed),
        (grpc.StatusCode.UNAVAILABLE, errors.Unavailable),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.Unavailable),
        (grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceeded),
        (grpc.StatusCode.DATA_LOSS, errors.ServerError),
        (grpc.StatusCode.UNKNOWN, errors.ServerError),
    ],
)
def test_plain_statuses_pick_the_class_by_code(
    server: StandIn, code: grpc.StatusCode, expected: type[errors.DecisionflowError]
) -> None:
    error = errors.map_rpc_error(raw_failure(server, Fail(code)))

    assert type(error) is expected
    assert error.reason == ""
    assert error.metadata == {}
    assert error.message == f"scripted {code.name}"


def test_a_caller_dependent_refusal_after_a_retry_is_indeterminate(server: StandIn) -> None:
    denied = raw_failure(server, Fail(grpc.StatusCode.PERMISSION_DENIED))
    invalid = raw_failure(server, Fail(grpc.StatusCode.INVALID_ARGUMENT))

    assert errors.map_rpc_error(denied, attempts=1).definite is True
    # An earlier attempt may have acted before credentials were refused; nothing is proven.
    assert errors.map_rpc_error(denied, attempts=2).definite is False
    # The same bytes are invalid on every attempt, so no attempt can have acted.
    assert errors.map_rpc_error(invalid, attempts=2).definite is True
    assert errors.map_rpc_error(invalid, attempts=2).attempts == 2


def test_a_checkpoint_save_failure_is_definite_for_its_own_attempt_only(server: StandIn) -> None:
    save_failed = raw_failure(server, Fail(grpc.StatusCode.UNAVAILABLE, Refusal(reasons.CHECKPOINT_SAVE_FAILED)))

    assert errors.map_rpc_error(save_failed, attempts=1).definite is True
    # An earlier attempt (a deadline, say) may have recorded what this one could not.
    assert errors.map_rpc_error(save_failed, attempts=2).definite is False


def test_an_rpc_error_without_a_call_becomes_a_server_error() -> None:
    error = errors.map_rpc_error(grpc.RpcError("no call"))

    assert type(error) is errors.ServerError
    assert error.code is grpc.StatusCode.UNKNOWN
    assert error.definite is False


def test_decisions_parse_leniently() -> None:
    assert Decision.parse("APPROVE") is Decision.APPROVE
    assert Decision.parse("DECISION_APPROVE") is Decision.APPROVE
    assert Decision.parse(" decline ") is Decision.DECLINE
    assert Decision.parse("") is Decision.UNSPECIFIED
    assert Decision.parse("MAYBE") is Decision.UNSPECIFIED


def test_a_class_that_names_a_reason_is_raised_for_it_with_the_declared_status() -> None:
    assert errors.error_class(grpc.StatusCode.FAILED_PRECONDITION, reasons.STALE_PROPOSAL) is errors.StaleProposal
    assert errors.error_class(grpc.StatusCode.DATA_LOSS, reasons.CHECKPOINT_INTEGRITY) is errors.CheckpointIntegrity
    # The reason under another status than its declared one is that status's failure.
    assert errors.error_class(grpc.StatusCode.UNAVAILABLE, reasons.STALE_PROPOSAL) is errors.Unavailable
    for declared in reasons.REFUSALS.values():
        cls = errors.error_class(grpc.StatusCode[declared.status], declared.reason)
        assert cls.__doc__ and "\n" not in cls.__doc__.strip(), f"{cls.__name__} needs a one-line docstring"


def test_a_class_may_name_only_a_declared_reason_and_only_one_class_a_reason() -> None:
    with pytest.raises(LookupError, match="NOT_DECLARED_ANYWHERE"):

        class Undeclared(errors.PreconditionFailed, reason="NOT_DECLARED_ANYWHERE"):
            """Names a reason nobody declared."""

    with pytest.raises(TypeError, match="SecondStale and StaleProposal both name STALE_PROPOSAL"):

        class SecondStale(errors.PreconditionFailed, reason=reasons.STALE_PROPOSAL):
            """Names a reason another class names."""

    assert errors.error_class(grpc.StatusCode.FAILED_PRECONDITION, reasons.STALE_PROPOSAL) is errors.StaleProposal


def test_a_class_that_disagrees_with_the_declaration_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # Declared indeterminate, but FAILED_PRECONDITION's class says definite: importing would fail.
    stale = reasons.refusal(reasons.STALE_PROPOSAL)
    newly = replace(stale, reason="NEWLY_DECLARED", definite=False)
    monkeypatch.setattr(reasons, "REFUSALS", {**reasons.REFUSALS, newly.reason: newly})

    with pytest.raises(TypeError, match="NEWLY_DECLARED is declared definite=False, but PreconditionFailed"):
        errors._check_against_the_declaration()


@pytest.mark.parametrize(
    ("refusal", "metadata", "attributes"),
    [
        (
            orchestrator_errors.NotFound("operation", OP),
            {reasons.OPERATION_ID: OP},
            {"operation_id": OP, "case_id": ""},
        ),
        (
            orchestrator_errors.NotFound("pending review", OP),
            {reasons.OPERATION_ID: OP},
            {"operation_id": OP, "case_id": ""},
        ),
        (orchestrator_errors.NotFound("case", "T-1"), {reasons.CASE_ID: "T-1"}, {"case_id": "T-1", "operation_id": ""}),
        (
            orchestrator_errors.StaleProposal(OP, CURRENT),
            {reasons.OPERATION_ID: OP, reasons.CURRENT_OPERATION_ID: CURRENT},
            {"operation_id": OP, "current_operation_id": CURRENT},
        ),
        (
            orchestrator_errors.CaseHasOpenProposal("T-1", CURRENT),
            {reasons.CASE_ID: "T-1", reasons.CURRENT_OPERATION_ID: CURRENT},
            {"case_id": "T-1", "current_operation_id": CURRENT, "definite": True},
        ),
        (
            orchestrator_errors.DecisionConflict(OP, DomainDecision.APPROVE.value),
            {reasons.OPERATION_ID: OP, reasons.RECORDED_DECISION: "DECISION_APPROVE"},
            {"operation_id": OP, "recorded_decision": Decision.APPROVE},
        ),
        (
            orchestrator_errors.DecisionConflict(OP, DomainDecision.DECLINE),
            {reasons.OPERATION_ID: OP, reasons.RECORDED_DECISION: "DECISION_DECLINE"},
            {"operation_id": OP, "recorded_decision": Decision.DECLINE},
        ),
        (
            orchestrator_errors.NotRedrivable(OP, OperationState.COMMITTED.value),
            {reasons.OPERATION_ID: OP, reasons.STATE: "OPERATION_STATE_COMMITTED"},
            {"operation_id": OP, "state": OperationState.COMMITTED},
        ),
        (
            orchestrator_errors.NotRedrivable(OP, OperationState.PENDING_REVIEW),
            {reasons.OPERATION_ID: OP, reasons.STATE: "OPERATION_STATE_PENDING_REVIEW"},
            {"operation_id": OP, "state": OperationState.PENDING_REVIEW},
        ),
        (
            orchestrator_errors.WorkflowVersionMismatch(OP, "review@1", "review@2"),
            {reasons.OPERATION_ID: OP, reasons.RECORDED: "review@1", reasons.RUNNING: "review@2"},
            {"operation_id": OP, "recorded": "review@1", "running": "review@2"},
        ),
        (
            orchestrator_errors.CheckpointIntegrity("ckpt-9", "HMAC does not match", operation_id=OP),
            {reasons.OPERATION_ID: OP, reasons.CHECKPOINT_ID: "ckpt-9"},
            {"operation_id": OP, "checkpoint_id": "ckpt-9", "definite": True},
        ),
        (receiver_errors.IdempotencyKeyReused(OP), {reasons.OPERATION_ID: OP}, {"operation_id": OP}),
        (
            receiver_errors.KeyRetentionExceeded(OP, "2026-11-29T21:00:00+00:00", "86400s"),
            {
                reasons.OPERATION_ID: OP,
                reasons.FIRST_ATTEMPTED_AT: "2026-11-29T21:00:00+00:00",
                reasons.KEY_RETENTION: "86400s",
            },
            {
                "operation_id": OP,
                "first_attempted_at": "2026-11-29T21:00:00+00:00",
                "key_retention": "86400s",
                "definite": True,
            },
        ),
        (receiver_errors.ReplyLost(OP), {reasons.OPERATION_ID: OP}, {"operation_id": OP, "definite": False}),
        (FourEyesViolation("sam"), {reasons.PRINCIPAL: "sam"}, {"principal": "sam"}),
        (
            orchestrator_errors.ReviewExpired(OP),
            {reasons.OPERATION_ID: OP},
            {"operation_id": OP, "definite": True, "retry_after": None},
        ),
        (
            orchestrator_errors.TooManyOpenReviews("ava", 25),
            {reasons.PRINCIPAL: "ava", reasons.OPEN_REVIEW_LIMIT: "25"},
            {"principal": "ava", "open_review_limit": 25, "definite": True},
        ),
        (
            orchestrator_errors.CallRateExceeded("ava", timedelta(milliseconds=250)),
            {reasons.PRINCIPAL: "ava", reasons.RETRY_AFTER: "0.250s"},
            {"principal": "ava", "retry_after": 0.25, "definite": True},
        ),
        (
            orchestrator_errors.ContentBudgetExceeded("ava", timedelta(seconds=12, milliseconds=5), 366869),
            {reasons.PRINCIPAL: "ava", reasons.RETRY_AFTER: "12.005s", reasons.CONTENT_BYTES: "366869"},
            {"principal": "ava", "retry_after": 12.005, "content_bytes": 366869, "definite": True},
        ),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, DomainError) else "",
)
def test_server_refusals_arrive_with_their_metadata_as_typed_attributes(
    server: StandIn, refusal: DomainError, metadata: dict[str, str], attributes: dict[str, object]
) -> None:
    table = {**ORCHESTRATOR_STATUS, **RECEIVER_STATUS}
    code = code_for(table, refusal)
    error = errors.map_rpc_error(raw_failure(server, Fail(code, refusal)))
    declared = reasons.refusal(refusal.reason)

    assert (error.code.name, error.reason, error.metadata) == (declared.status, refusal.reason, metadata)
    assert error.definite is declared.definite
    assert {name: getattr(error, name) for name in attributes} == attributes
