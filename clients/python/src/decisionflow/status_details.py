"""The rich status a refusal carries on the wire, read back: google.rpc.Status in the
``grpc-status-details-bin`` trailer, with one ErrorInfo (reason, domain, metadata) and, for
INVALID_ARGUMENT, a BadRequest naming each bad field.

The servers write it (``decisionflow.rpc_errors``); the clients read it here.
"""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from decisionflow.reasons import FieldViolation

ERROR_DOMAIN = "decisionflow.v1"


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
