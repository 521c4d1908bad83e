"""Domain errors (``decisionflow_server.foundation.errors``) as a rich gRPC status: google.rpc.Status with ErrorInfo,
BadRequest for bad fields and RetryInfo for a refusal that names when to come back (read back by
``decisionflow.status_details``).

Each server maps its domain errors to a status code in exactly one table (``StatusTable``), built by
``status_table`` from the domain error classes it answers with: a class's reason is the service's
(``reason = reasons.X`` in its errors.py), the status that reason travels with is the declaration's
(``decisionflow.reasons``). The server's one pass per call (``decisionflow_server.runtime.served_calls``) applies
the table to every call with ``refuse``, so servicers never call ``context.abort``.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from decisionflow import reasons
from decisionflow.status_details import ERROR_DOMAIN
from decisionflow_server.foundation.errors import DomainError, InvalidRequest
from decisionflow_server.foundation.handlers import Context
from decisionflow_server.runtime import tracing

StatusTable = Mapping[type[DomainError], grpc.StatusCode]


def status_table(*families: type[DomainError]) -> StatusTable:
    """Return the table answering each class of families, and each subclass of one, that has a reason
    with the status its reason is declared with; a reason nobody declared fails here, at import."""
    table: dict[type[DomainError], grpc.StatusCode] = {}
    pending = list(families)
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.reason:
            table[cls] = grpc.StatusCode[reasons.refusal(cls.reason).status]
    return table


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
    """Return a grpc.Status carrying ErrorInfo (BadRequest for an InvalidRequest, RetryInfo when the
    error names a retry delay), small enough for gRPC's trailer limit whatever the error holds."""
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
    if error.retry_after is not None:
        delay = duration_pb2.Duration()
        delay.FromTimedelta(error.retry_after)
        packed_retry = any_pb2.Any()
        packed_retry.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        details.append(packed_retry)
    status = status_pb2.Status(code=code.value[0], message=error.message[:1024], details=details)
    return rpc_status.to_status(status)


async def refuse(table: StatusTable, error: DomainError, context: Context) -> None:
    """Answer the call with the rich status table assigns to error, noting on its access line why."""
    noted = {name: error.metadata.get(name, "") for name in NOTED_METADATA}
    tracing.note_refusal(error.reason, _cut(error.message), noted)
    await context.abort_with_status(rich_status(code_for(table, error), error))  # type: ignore[attr-defined]


assert code_pb2.OK == 0  # the google.rpc code numbering matches grpc.StatusCode's
