"""Domain errors (``decisionflow.errors``) as a rich gRPC status: google.rpc.Status with ErrorInfo
and BadRequest.

Each server maps its domain errors to a status code in exactly one table
(``StatusTable``); ``guard`` applies that table at the servicer boundary, so service code
never calls ``context.abort``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from decisionflow.errors import DomainError, FieldViolation, InvalidRequest

ERROR_DOMAIN = "decisionflow.v1"


StatusTable = Mapping[type[DomainError], grpc.StatusCode]


def code_for(table: StatusTable, error: DomainError) -> grpc.StatusCode:
    """Return the status code the table assigns to error (most specific class first)."""
    for cls in type(error).__mro__:
        if cls in table:
            return table[cls]
    return grpc.StatusCode.INTERNAL


# The status travels in the trailers, which gRPC refuses above 16 KiB (and may above 8 KiB): the
# caller would get RESOURCE_EXHAUSTED instead of the refusal. So details name the first violations
# only, and each text is cut; a request with thousands of bad fields is still told what is wrong.
MAX_VIOLATIONS = 20
MAX_DETAIL_CHARS = 256


def _cut(text: str) -> str:
    return text[:MAX_DETAIL_CHARS]


def rich_status(code: grpc.StatusCode, error: DomainError) -> grpc.Status:
    """Return a grpc.Status carrying ErrorInfo (and BadRequest for an InvalidRequest), small enough
    for gRPC's trailer limit whatever the error holds."""
    details: list[any_pb2.Any] = []
    metadata = {_cut(key): _cut(value) for key, value in error.metadata.items()}
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=metadata)
    packed = any_pb2.Any()
    packed.Pack(info)
    details.append(packed)
    if isinstance(error, InvalidRequest):
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=_cut(v.field), description=_cut(v.description))
                for v in error.violations[:MAX_VIOLATIONS]
            ]
        )
        packed_bad = any_pb2.Any()
        packed_bad.Pack(bad)
        details.append(packed_bad)
    status = status_pb2.Status(code=code.value[0], message=error.message[:1024], details=details)
    return rpc_status.to_status(status)


def error_info(call_error: grpc.RpcError) -> tuple[str, dict[str, str], list[FieldViolation]]:
    """Return (reason, metadata, field violations) carried by a failed call's rich status."""
    status = rpc_status.from_call(call_error)  # type: ignore[arg-type]
    reason, metadata, violations = "", dict[str, str](), list[FieldViolation]()
    if status is None:
        return reason, metadata, violations
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, metadata = info.reason, dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations = [FieldViolation(v.field, v.description) for v in bad.field_violations]
    return reason, metadata, violations


_Method = TypeVar("_Method", bound=Callable[..., Awaitable[Any]])


def guard(table: StatusTable) -> Callable[[_Method], _Method]:
    """Decorate an aio servicer method so a DomainError aborts the call with its mapped rich status."""

    def decorate(method: _Method) -> _Method:
        @functools.wraps(method)
        async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                return await method(self, request, context)
            except DomainError as error:
                await context.abort_with_status(rich_status(code_for(table, error), error))  # type: ignore[attr-defined]

        return wrapper  # type: ignore[return-value]

    return decorate


assert code_pb2.OK == 0  # the google.rpc code numbering matches grpc.StatusCode's
