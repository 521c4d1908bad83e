"""Every RPC of every service answers a refusal with a rich status: the status code, and
google.rpc.ErrorInfo with domain ``decisionflow.v1`` and a reason, whether the refusal comes from
the servicer (a malformed request), from request parsing (bytes that are no request) or from
authentication and authorization. The servers are built by each service's create_server, as
main.py builds them; the methods come from the generated service descriptors, so an RPC added
to a .proto file is covered without being listed here.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from decisionflow import reasons
from decisionflow.status_details import ERROR_DOMAIN
from decisionflow.v1 import audit_pb2, events_pb2, operations_pb2, review_pb2
from decisionflow_server.runtime.auth import RPC_ROLES
from tests.security.contract import contract_methods, method_path, request_class, served_by_receiver
from tests.support.secure import PRINCIPALS, SINGLE_ROLE_PRINCIPALS, SecureStack, raw_invoke, start_secure_stack

METHODS = contract_methods()

# The few methods for which the empty request is well formed, and a request each refuses instead.
REFUSED_REQUESTS: dict[str, Message] = {
    "/decisionflow.v1.OperationsService/ListOperations": operations_pb2.ListOperationsRequest(page_size=-1),
    "/decisionflow.v1.ReviewService/ListPendingReviews": review_pb2.ListPendingReviewsRequest(page_size=-1),
    "/decisionflow.v1.AuditService/ListLeaves": audit_pb2.ListLeavesRequest(page_size=-1),
    # Well formed for an auditor or an operator (every event); refused for every caller:
    "/decisionflow.v1.EventService/WatchEvents": events_pb2.WatchEventsRequest(
        kinds=[events_pb2.EVENT_KIND_UNSPECIFIED]
    ),
}
# Field 1, length-delimited, announced as 5 bytes long but cut after 3: no message parses it.
NOT_A_MESSAGE = b"\x0a\x05abc"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    """Both servers with authentication on, for the whole module."""
    stack = start_secure_stack(tmp_path_factory.mktemp("rich-status"))
    try:
        yield stack
    finally:
        stack.close()


def _refused_request(method: MethodDescriptor) -> bytes:
    request = REFUSED_REQUESTS.get(method_path(method)) or request_class(method)()
    return request.SerializeToString()


def _allowed(method: MethodDescriptor) -> str:
    return next(name for name in SINGLE_ROLE_PRINCIPALS if PRINCIPALS[name] & RPC_ROLES[method_path(method)])


def _not_allowed(method: MethodDescriptor) -> str:
    return next(name for name in SINGLE_ROLE_PRINCIPALS if not PRINCIPALS[name] & RPC_ROLES[method_path(method)])


def _refusal(
    secure: SecureStack, method: MethodDescriptor, request: bytes, caller: str | None
) -> tuple[grpc.StatusCode, error_details_pb2.ErrorInfo, error_details_pb2.BadRequest | None]:
    """Send request bytes as caller (None: no credentials); return the code, ErrorInfo and any BadRequest."""
    channel = secure.channel(served_by_receiver(method))
    with pytest.raises(grpc.RpcError) as refused:
        raw_invoke(channel, method_path(method), request, () if caller is None else secure.as_(caller))
    status = rpc_status.from_call(refused.value)  # type: ignore[arg-type]
    assert status is not None, "the refusal carries no google.rpc.Status"
    assert status.code == refused.value.code().value[0] and status.message
    infos, bad = [], None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            infos.append(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
    assert len(infos) == 1, "exactly one ErrorInfo expected"
    assert infos[0].domain == ERROR_DOMAIN and infos[0].reason
    return refused.value.code(), infos[0], bad


def test_every_method_of_the_contract_is_served_by_a_test_server() -> None:
    assert {method_path(method) for method in METHODS} == set(RPC_ROLES)


# A request without fields (GetCaller's) has nothing to be malformed: only bytes that are no request. Nor
# has GetCheckpoint's: every tree size is well formed (one no checkpoint was signed at is NOT_FOUND).
ALWAYS_WELL_FORMED = {"/decisionflow.v1.AuditService/GetCheckpoint"}
METHODS_WITH_FIELDS = [
    method for method in METHODS if method.input_type.fields and method_path(method) not in ALWAYS_WELL_FORMED
]


@pytest.mark.parametrize("method", METHODS_WITH_FIELDS, ids=method_path)
def test_a_malformed_request_is_refused_with_a_rich_status(secure: SecureStack, method: MethodDescriptor) -> None:
    code, info, bad = _refusal(secure, method, _refused_request(method), _allowed(method))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert info.reason in (reasons.INVALID_ARGUMENT, reasons.DECISION_REQUIRED)
    assert bad is not None and bad.field_violations, "field violations expected"


@pytest.mark.parametrize("method", METHODS, ids=method_path)
def test_bytes_that_are_no_request_are_refused_with_a_rich_status(
    secure: SecureStack, method: MethodDescriptor
) -> None:
    code, info, bad = _refusal(secure, method, NOT_A_MESSAGE, _allowed(method))
    assert (code, info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reasons.INVALID_ARGUMENT)
    assert bad is not None and [v.field for v in bad.field_violations] == ["request"]


@pytest.mark.parametrize("method", METHODS, ids=method_path)
def test_a_call_without_credentials_is_refused_with_a_rich_status(
    secure: SecureStack, method: MethodDescriptor
) -> None:
    code, info, _ = _refusal(secure, method, _refused_request(method), None)
    assert (code, info.reason) == (grpc.StatusCode.UNAUTHENTICATED, reasons.UNAUTHENTICATED)


@pytest.mark.parametrize("method", METHODS, ids=method_path)
def test_a_caller_without_the_role_is_refused_with_a_rich_status(secure: SecureStack, method: MethodDescriptor) -> None:
    caller = _not_allowed(method)
    code, info, _ = _refusal(secure, method, _refused_request(method), caller)
    assert (code, info.reason) == (grpc.StatusCode.PERMISSION_DENIED, reasons.PERMISSION_DENIED)
    assert info.metadata[reasons.PRINCIPAL] == caller
