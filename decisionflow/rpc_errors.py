"""Domain errors (``decisionflow.errors``) as a rich gRPC status: google.rpc.Status with ErrorInfo
and BadRequest (read back by ``decisionflow.status_details.error_info``).

Each server maps its domain errors to a status code in exactly one table (``StatusTable``);
``RefusalsAsStatus``, installed once when the server is built (``decisionflow.serving``),
applies that table to every call, so neither servicers nor interceptors call ``context.abort``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from decisionflow import reasons, tracing
from decisionflow.errors import DomainError, InvalidRequest
from decisionflow.handlers import Context, ServerInterceptor, behaviour_of, with_behaviour
from decisionflow.status_details import ERROR_DOMAIN

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
# The ids of a refusal's ErrorInfo that its access line carries: a caller refused for its role is
# named there, and a refused checkpoint by its id (docs/observability.md).
NOTED_METADATA = (reasons.PRINCIPAL, reasons.OPERATION_ID, reasons.CASE_ID, reasons.CHECKPOINT_ID)


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


class RefusalsAsStatus(ServerInterceptor):
    """Answers a DomainError raised by any method, or by an interceptor inside this one, with the
    rich status its server's table assigns."""

    def __init__(self, table: StatusTable) -> None:
        self._table = table

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """Return the method's handler with its domain errors turned into rich statuses."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        behaviour = behaviour_of(handler)
        if inspect.isasyncgenfunction(behaviour):
            return with_behaviour(handler, self._streamed(behaviour))
        if inspect.iscoroutinefunction(behaviour):
            return with_behaviour(handler, self._unary(behaviour))
        return handler  # a synchronous behaviour runs on a thread, where no domain error is raised

    async def _refuse(self, error: DomainError, context: Context) -> None:
        noted = {name: error.metadata.get(name, "") for name in NOTED_METADATA}
        tracing.note_refusal(error.reason, _cut(error.message), noted)
        await context.abort_with_status(rich_status(code_for(self._table, error), error))  # type: ignore[attr-defined]

    def _unary(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def answered(request: Any, context: Context) -> Any:
            try:
                return await behaviour(request, context)
            except DomainError as error:
                await self._refuse(error, context)

        return answered

    def _streamed(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def answered(request: Any, context: Context) -> AsyncIterator[Any]:
            try:
                async for response in behaviour(request, context):
                    yield response
            except DomainError as error:
                await self._refuse(error, context)

        return answered


assert code_pb2.OK == 0  # the google.rpc code numbering matches grpc.StatusCode's
