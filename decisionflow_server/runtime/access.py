"""One access line per served call (docs/observability.md).

When a call ends, the server's one pass per call (``decisionflow_server.runtime.served_calls``) logs one line on
the ``decisionflow_server.runtime.access`` logger with the method, the final gRPC code, the duration, the
principal and the operation and case ids, and for a refusal its reason and detail (noted by
``decisionflow_server.runtime.rpc_errors.refuse``, which also names the principal a role check refused). Its level
says what the line asks of an operator: info for OK, warning for a refusal or a transient failure
(the caller was told why; a burst of them is worth a look) and for an OK whose outcome is unknown
or rejected (the message then names the outcome), error for a server fault (DATA_LOSS, INTERNAL,
UNKNOWN, UNIMPLEMENTED). Health checks and reflection are logged at debug: probes would drown the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import grpc

logger = logging.getLogger("decisionflow.access")

SERVER_FAULT_CODES: frozenset[grpc.StatusCode] = frozenset(
    {grpc.StatusCode.DATA_LOSS, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNIMPLEMENTED}
)
# Calls an orchestrator or probe makes all the time; their lines help only when debugging.
QUIET_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
NOTED_FIELDS = ("principal", "operation_id", "case_id", "checkpoint_id", "outcome", "reason", "detail")


# Outcomes of an answered Approve or re-drive that leave an approval without its effect.
UNSETTLED_OUTCOMES = frozenset({"unknown", "rejected"})


def access_level(method: str, code: grpc.StatusCode, outcome: str = "") -> int:
    """Return the level of a call's access line: info OK, error for a server fault, warning otherwise
    (an OK whose outcome leaves the effect unknown or rejected included)."""
    if method.startswith(QUIET_SERVICES):
        return logging.DEBUG
    if code is grpc.StatusCode.OK:
        return logging.WARNING if outcome in UNSETTLED_OUTCOMES else logging.INFO
    if code in SERVER_FAULT_CODES:
        return logging.ERROR
    return logging.WARNING


def log_access(method: str, code: grpc.StatusCode, duration_ms: float, notes: Mapping[str, str]) -> None:
    """Log the access line of one finished call (inside its span, so the line carries the trace id)."""
    outcome = notes.get("outcome", "")
    level = access_level(method, code, outcome)
    if not logger.isEnabledFor(level):
        return
    extra: dict[str, object] = {"rpc": method, "code": code.name, "duration_ms": round(duration_ms, 3)}
    extra.update({name: notes[name] for name in NOTED_FIELDS if notes.get(name)})
    # The call answered OK, but the approval has no effect yet: the line must not read as a success.
    unsettled = code is grpc.StatusCode.OK and outcome in UNSETTLED_OUTCOMES
    answer = f"{code.name} outcome {outcome}" if unsettled else code.name
    logger.log(level, "%s %s in %.1f ms", method, answer, duration_ms, extra=extra)
