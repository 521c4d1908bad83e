"""The rich status a refusal carries on the wire, read back: google.rpc.Status in the
``grpc-status-details-bin`` trailer, with one ErrorInfo (reason, domain, metadata), for
INVALID_ARGUMENT a BadRequest naming each bad field, and for a budget refusal a RetryInfo saying
when the same request may succeed.

The servers write it (``decisionflow_server.runtime.rpc_errors``); the clients read it here.
"""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from decisionflow.reasons import FieldViolation

ERROR_DOMAIN = "decisionflow.v1"


def _status(call_error: grpc.RpcError) -> status_pb2.Status | None:
    return rpc_status.from_call(call_error)  # type: ignore[arg-type]


def error_info(call_error: grpc.RpcError) -> tuple[str, dict[str, str], list[FieldViolation]]:
    """Return (reason, metadata, field violations) carried by a failed call's rich status."""
    status = _status(call_error)
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


def retry_delay(call_error: BaseException | None) -> float | None:
    """Return the seconds a failed call's RetryInfo asks the caller to wait before repeating it; None
    when it carries none (or is not a call that ended with a rich status)."""
    if not isinstance(call_error, grpc.RpcError):
        return None
    try:
        status = _status(call_error)
    except (AttributeError, ValueError):
        # No trailing metadata (a failure made up by a test or a library), or a detail that
        # contradicts the call's code: there is no delay to honour.
        return None
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            seconds: float = info.retry_delay.ToTimedelta().total_seconds()
            return max(0.0, seconds)
    return None
