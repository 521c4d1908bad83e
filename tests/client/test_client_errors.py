"""map_rpc_error: rich statuses from a real server become typed errors with their attributes."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from decisionflow import reasons
from decisionflow.channels import insecure_channel
from decisionflow.client import errors
from decisionflow.client.views import Decision
from decisionflow.errors import DomainError, FieldViolation, InvalidRequest
from decisionflow.v1 import review_pb2, review_pb2_grpc

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
        (grpc.StatusCode.FAILED_PRECONDITION, "NOT_REDRIVABLE", errors.PreconditionFailed, True),
        (grpc.StatusCode.DATA_LOSS, reasons.CHECKPOINT_INTEGRITY, errors.CheckpointIntegrity, False),
        (grpc.StatusCode.NOT_FOUND, reasons.NOT_FOUND, errors.NotFound, True),
        (grpc.StatusCode.PERMISSION_DENIED, reasons.FOUR_EYES, errors.PermissionDenied, True),
        (grpc.StatusCode.UNAUTHENTICATED, reasons.UNAUTHENTICATED, errors.Unauthenticated, True),
        (grpc.StatusCode.UNAVAILABLE, reasons.CHECKPOINT_SAVE_FAILED, errors.Unavailable, False),
        (grpc.StatusCode.INTERNAL, "WORKFLOW_PROTOCOL", errors.ServerError, False),
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
