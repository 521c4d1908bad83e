"""OperationsClient against a scripted OperationsService: paging, settlements, re-drives."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from decisionflow.channels import insecure_channel
from decisionflow.client import (
    Consistency,
    LookupAnswer,
    LookupStatus,
    OperationsClient,
    OperationState,
    Outcome,
    Receipt,
    Settlement,
)
from decisionflow.v1 import common_pb2, operations_pb2, review_pb2
from decisionflow.vocabulary import OperationId

from .client_standin import Fail, Sleeps, StandIn, standin

OPS = ["op-v1-" + str(n) * 64 for n in range(1, 6)]
OBSERVED = datetime(2026, 10, 2, 8, 0, tzinfo=UTC)


def operation(
    operation_id: str, state: common_pb2.OperationState.ValueType = common_pb2.OPERATION_STATE_UNKNOWN
) -> review_pb2.Operation:
    return review_pb2.Operation(operation_id=operation_id, case_id="T-1042", state=state)


@pytest.fixture
def server() -> Iterator[StandIn]:
    with standin() as running:
        yield running


@pytest.fixture
def client(server: StandIn) -> Iterator[OperationsClient]:
    with insecure_channel(server.target) as channel:
        yield OperationsClient(channel, sleep=Sleeps())


def test_list_operations_pages_lazily_with_the_filters(server: StandIn, client: OperationsClient) -> None:
    server.script.then(
        "ListOperations",
        operations_pb2.ListOperationsResponse(operations=[operation(OPS[0]), operation(OPS[1])], next_page_token="p2"),
        Fail(grpc.StatusCode.UNAVAILABLE),
        operations_pb2.ListOperationsResponse(operations=[operation(OPS[2], common_pb2.OPERATION_STATE_APPROVED)]),
    )

    pages = client.list_operations(
        [OperationState.APPROVED, OperationState.UNKNOWN], min_age=timedelta(minutes=5), page_size=2
    )
    first = next(pages)
    assert len(server.script.calls("ListOperations")) == 1  # the second page waits for the caller
    rest = list(pages)

    assert [o.operation_id for o in [first, *rest]] == OPS[:3]
    assert rest[-1].state is OperationState.APPROVED
    calls = server.script.calls("ListOperations")
    assert [c.request.page_token for c in calls] == ["", "p2", "p2"]
    for call in calls:
        assert list(call.request.states) == [common_pb2.OPERATION_STATE_APPROVED, common_pb2.OPERATION_STATE_UNKNOWN]
        assert call.request.min_age.ToTimedelta() == timedelta(minutes=5)
        assert call.request.page_size == 2
        assert call.time_remaining is not None


def test_list_operations_page_returns_one_page_and_its_token(server: StandIn, client: OperationsClient) -> None:
    server.script.then(
        "ListOperations",
        operations_pb2.ListOperationsResponse(operations=[operation(OPS[2])], next_page_token="p3"),
    )

    page = client.list_operations_page([OperationState.UNKNOWN], page_size=1, page_token="p2", case_id="T-7")

    assert [o.operation_id for o in page.operations] == OPS[2:3]
    assert page.next_page_token == "p3"
    [call] = server.script.calls("ListOperations")
    assert (call.request.page_token, call.request.page_size, call.request.case_id) == ("p2", 1, "T-7")
    assert list(call.request.states) == [common_pb2.OPERATION_STATE_UNKNOWN]


def test_settle_operation_sends_the_lookup_as_observed(server: StandIn, client: OperationsClient) -> None:
    server.script.answer(
        "SettleOperation",
        operations_pb2.SettleOperationResponse(
            operation=operation(OPS[0], common_pb2.OPERATION_STATE_COMMITTED), settled=True
        ),
    )
    answer = LookupAnswer(
        operation_id=OPS[0],
        status=LookupStatus.APPLIED,
        receipt=Receipt("rcpt-9", OperationId(OPS[0]), OBSERVED),
        consistency=Consistency.STRONG,
        observed_at=OBSERVED,
    )

    result = client.settle_operation(Settlement.from_lookup(answer))

    (call,) = server.script.calls("SettleOperation")
    sent = call.request.settlement
    assert sent.operation_id == OPS[0]
    assert sent.status == common_pb2.LOOKUP_STATUS_APPLIED
    assert sent.consistency == common_pb2.CONSISTENCY_STRONG
    assert sent.receipt.receipt_id == "rcpt-9"
    assert sent.receipt.applied_at.ToDatetime(tzinfo=UTC) == OBSERVED
    assert sent.observed_at.ToDatetime(tzinfo=UTC) == OBSERVED
    assert result.settled is True
    assert result.operation.state is OperationState.COMMITTED


def test_batch_settle_keeps_request_order(server: StandIn, client: OperationsClient) -> None:
    def settle_all(
        request: operations_pb2.BatchSettleOperationsRequest,
    ) -> operations_pb2.BatchSettleOperationsResponse:
        return operations_pb2.BatchSettleOperationsResponse(
            results=[
                operations_pb2.SettleOperationResponse(operation=operation(s.operation_id)) for s in request.settlements
            ]
        )

    server.script.answer("BatchSettleOperations", settle_all)
    settlements = [
        Settlement(OPS[1], LookupStatus.NOT_FOUND, consistency=Consistency.EVENTUAL),
        Settlement.failed(OPS[0], "receiver unreachable"),
    ]

    results = client.batch_settle_operations(settlements)

    assert [r.operation.operation_id for r in results] == [OPS[1], OPS[0]]
    assert all(r.settled is False for r in results)
    (call,) = server.script.calls("BatchSettleOperations")
    failed = call.request.settlements[1]
    assert failed.status == common_pb2.LOOKUP_STATUS_UNSPECIFIED
    assert failed.error == "receiver unreachable"
    assert not failed.HasField("receipt")
    assert not failed.HasField("observed_at")


def test_redrive_returns_an_unknown_outcome(server: StandIn, client: OperationsClient) -> None:
    server.script.then(
        "RedriveOperation",
        Fail(grpc.StatusCode.DEADLINE_EXCEEDED),
        operations_pb2.RedriveOperationResponse(operation=operation(OPS[3]), outcome=common_pb2.OUTCOME_UNKNOWN),
    )

    result = client.redrive_operation(OPS[3])

    assert result.outcome is Outcome.UNKNOWN
    assert result.operation.state is OperationState.UNKNOWN
    assert [c.request.operation_id for c in server.script.calls("RedriveOperation")] == [OPS[3], OPS[3]]
