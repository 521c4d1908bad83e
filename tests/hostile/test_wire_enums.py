"""Enum numbers the proto does not define are refused with INVALID_ARGUMENT naming the field, and
nothing is written (protobuf enums are open: a peer can send any number)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, operations_pb2
from tests.security.dbstate import snapshot
from tests.support.seeding import seed_operations
from tests.support.stack import Stack

UNDEFINED = 99


def _settlement(operation_id: str, **fields: int) -> operations_pb2.Settlement:
    values = {"status": common_pb2.LOOKUP_STATUS_NOT_FOUND, "consistency": common_pb2.CONSISTENCY_STRONG} | fields
    return operations_pb2.Settlement(operation_id=operation_id, error="lookup", **values)  # type: ignore[arg-type]


def _refused_fields(call: Callable[[], object]) -> list[str]:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    return [violation.field for violation in error_info(refused.value)[2]]


@pytest.mark.parametrize("enum_field", ["status", "consistency"])
def test_settlements_with_undefined_enum_values_are_refused_and_record_nothing(
    make_stack: Callable[..., Stack], enum_field: str
) -> None:
    stack = make_stack()
    first, second = (seeded.operation_id for seeded in seed_operations(stack.orchestrator_url, 2))
    operations = stack.operations()
    before = snapshot(stack.orchestrator_url)

    single = operations_pb2.SettleOperationRequest(settlement=_settlement(first, **{enum_field: UNDEFINED}))
    assert _refused_fields(lambda: operations.SettleOperation(single, timeout=10)) == [f"settlement.{enum_field}"]
    # One bad item refuses the batch: the good settlement before it is not recorded either.
    batch = operations_pb2.BatchSettleOperationsRequest(
        settlements=[_settlement(first), _settlement(second, **{enum_field: UNDEFINED})]
    )
    assert _refused_fields(lambda: operations.BatchSettleOperations(batch, timeout=10)) == [
        f"settlements[1].{enum_field}"
    ]
    assert snapshot(stack.orchestrator_url) == before

    # Every defined value is still accepted.
    recorded = operations.SettleOperation(
        operations_pb2.SettleOperationRequest(settlement=_settlement(first)), timeout=10
    )
    assert recorded.operation.last_lookup.status == common_pb2.LOOKUP_STATUS_NOT_FOUND
    assert recorded.operation.last_lookup.consistency == common_pb2.CONSISTENCY_STRONG


def test_list_operations_refuses_an_undefined_state(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    request = operations_pb2.ListOperationsRequest(states=[common_pb2.OPERATION_STATE_UNKNOWN, UNDEFINED])  # type: ignore[list-item]
    assert _refused_fields(lambda: stack.operations().ListOperations(request, timeout=10)) == ["states[1]"]
