"""One access line per served call, and its SERVER span (docs/observability.md).

``ObservedCalls`` is a server's outermost interceptor: it opens the call's span (``decisionflow.tracing``)
and, when the call ends, logs one line on the ``decisionflow.access`` logger with the method, the final
gRPC code, the duration, the principal and the operation and case ids, and for a refusal its reason
and detail (noted by ``decisionflow.rpc_errors.RefusalsAsStatus``, which also names the principal a
role check refused). Its level says what the line
asks of an operator: info for OK, warning for a refusal or a transient failure (the caller was told
why; a burst of them is worth a look) and for an OK whose outcome is unknown or rejected (the
message then names the outcome), error for a server fault (DATA_LOSS, INTERNAL, UNKNOWN,
UNIMPLEMENTED). Health checks and reflection are logged at debug: probes would drown the rest.

``NotedCalls`` sits innermost, after authentication and request parsing, where the principal and the
parsed request are known, and notes them for the access line and the span.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc

from decisionflow import tracing
from decisionflow.auth import ANONYMOUS, current_principal
from decisionflow.client_tracing import request_ids
from decisionflow.errors import DomainError
from decisionflow.handlers import ServerInterceptor, behaviour_of, final_code, with_behaviour

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


class ObservedCalls(ServerInterceptor):
    """Outermost interceptor: a SERVER span per unary call and one access line when it ends."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """Return the handler with its unary behaviour timed, traced and logged."""
        handler = await continuation(handler_call_details)
        if handler is None or not inspect.iscoroutinefunction(behaviour_of(handler)):
            return handler  # streams (health Watch, reflection) are neither traced nor logged
        behaviour = behaviour_of(handler)
        method = handler_call_details.method
        metadata = handler_call_details.invocation_metadata

        async def observed(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            with tracing.call_notes() as notes, tracing.server_span(method, metadata) as span:
                error: BaseException | None = None
                try:
                    return await behaviour(request, context)
                except BaseException as exc:
                    error = exc
                    raise
                finally:
                    code = final_code(context, error)
                    tracing.end_status(span, code)
                    log_access(method, code, (time.perf_counter() - started) * 1000, notes)

        return with_behaviour(handler, observed)


class NotedCalls(ServerInterceptor):
    """Innermost interceptor: notes the admitted principal and the request's operation and case ids, and
    tells on_admitted the peer of every call authentication admitted (the connection guard's "used")."""

    def __init__(self, on_admitted: Callable[[str], None] | None = None) -> None:
        self._on_admitted = on_admitted

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """Return the handler with its unary behaviour noting who called and about what."""
        handler = await continuation(handler_call_details)
        # Every service method is unary; a streaming one (health's Watch) is exempt from authentication.
        if handler is None or not inspect.iscoroutinefunction(behaviour_of(handler)):
            return handler
        behaviour = behaviour_of(handler)
        on_admitted = self._on_admitted

        async def noted(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                admitted = current_principal()
            except DomainError:  # not admitted: health and reflection, or a server without authentication
                admitted = ANONYMOUS
            else:
                if on_admitted is not None:
                    on_admitted(context.peer())
            principal = "" if admitted is ANONYMOUS else admitted.name
            tracing.annotate(principal=principal, **request_ids(request))
            return await behaviour(request, context)

        return with_behaviour(handler, noted)
