"""Bad input is refused with INVALID_ARGUMENT and field violations, and nothing is stored."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, operations_pb2, review_pb2
from decisionflow_server.foundation import page_tokens
from tests.support.stack import Stack, count, policy, start_request

TABLES = ("proposals", "operations", "pending_reviews", "checkpoints", "cases", "decisions")


def _with(**changes: object) -> review_pb2.StartReviewRequest:
    request = start_request()
    for name, value in changes.items():
        if name == "evidence":
            del request.evidence[:]
            request.evidence.extend(value)  # type: ignore[arg-type]
        else:
            setattr(request, name, value)
    return request


CASES = {
    "oversize body": (_with(body="x" * (64 * 1024 + 1)), "body"),
    "empty body": (_with(body=""), "body"),
    "NUL in body": (_with(body="a\x00b"), "body"),
    "malformed case id": (_with(case_id="T 1042; DROP TABLE proposals"), "case_id"),
    "unknown action": (_with(action="wire_money"), "action"),
    "too many evidence items": (
        _with(evidence=[common_pb2.Evidence(source_id=f"S-{i}", version=1, quotation="q") for i in range(33)]),
        "evidence",
    ),
    "duplicate source id": (
        _with(
            evidence=[
                common_pb2.Evidence(source_id="S-1", version=1, quotation="q"),
                common_pb2.Evidence(source_id="S-1", version=2, quotation="q"),
            ]
        ),
        "evidence[1].source_id",
    ),
    "malformed source id": (
        _with(evidence=[common_pb2.Evidence(source_id="S 1'--", version=1, quotation="q")]),
        "evidence[0].source_id",
    ),
    "oversize quotation": (
        _with(evidence=[common_pb2.Evidence(source_id="S-1", version=1, quotation="q" * 9000)]),
        "evidence[0].quotation",
    ),
    "huge version": (
        _with(evidence=[common_pb2.Evidence(source_id="S-1", version=2**64 - 1, quotation="q")]),
        "evidence[0].version",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_start_review_refuses_bad_input(make_stack: Callable[..., Stack], name: str) -> None:
    stack = make_stack()
    request, field = CASES[name]
    with pytest.raises(grpc.RpcError) as refused:
        stack.review().StartReview(request, timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    _, _, violations = error_info(refused.value)
    assert field in [v.field for v in violations], violations
    for table in TABLES:
        assert count(stack.orchestrator_url, f"SELECT count(*) FROM {table}") == 0, table


def test_missing_policy_and_malformed_ids_are_refused(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    review = stack.review()
    request = start_request()
    request.ClearField("policy")
    calls: list[Callable[[], object]] = [
        lambda: review.StartReview(request, timeout=10),
        lambda: review.Approve(
            review_pb2.ApproveRequest(operation_id="op-v1-XYZ", decision=common_pb2.DECISION_APPROVE), timeout=10
        ),
        lambda: review.Approve(
            review_pb2.ApproveRequest(operation_id="op-v1-" + "a" * 64, decision=7),  # type: ignore[arg-type]
            timeout=10,
        ),
        lambda: review.GetOperation(review_pb2.GetOperationRequest(operation_id="' OR 1=1 --"), timeout=10),
        lambda: review.GetProposal(review_pb2.GetProposalRequest(), timeout=10),
        lambda: review.EditProposal(
            review_pb2.EditProposalRequest(expected_operation_id="nope", body="b", policy=policy()), timeout=10
        ),
    ]
    for call in calls:
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(refused.value)[2], "field violations expected"
    for table in TABLES:
        assert count(stack.orchestrator_url, f"SELECT count(*) FROM {table}") == 0, table


def test_unknown_operation_is_not_found(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    with pytest.raises(grpc.RpcError) as missing:
        stack.review().Approve(
            review_pb2.ApproveRequest(operation_id="op-v1-" + "0" * 64, decision=common_pb2.DECISION_APPROVE),
            timeout=10,
        )
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_page_token_without_a_utc_offset_is_refused(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    # Issued tokens always carry an offset; a time without one names no instant.
    operation_id = "op-v1-" + "0" * 64
    issued = page_tokens.encode("operations", "2026-01-01T00:00:00+00:00", operation_id)
    stack.operations().ListOperations(operations_pb2.ListOperationsRequest(page_token=issued), timeout=10)
    for forged in (
        page_tokens.encode("operations", "2026-01-01T00:00:00", operation_id),
        page_tokens.encode("effects", 41),  # a token of the receiver's listing
    ):
        request = operations_pb2.ListOperationsRequest(page_token=forged)
        with pytest.raises(grpc.RpcError) as refused:
            stack.operations().ListOperations(request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert [v.field for v in error_info(refused.value)[2]] == ["page_token"]
