"""CLIENT spans for the decisionflow clients: one span per unary call, its W3C context sent in the
call's metadata (``traceparent``), so a server's SERVER span joins the caller's trace.

Needs only the OpenTelemetry API (``pip install 'decisionflow-client[tracing]'``); the channels of
``decisionflow.channels`` install these interceptors when it is importable. Until the application
sets up an SDK (``trace.set_tracer_provider``) the API hands out non-recording spans and each call
costs one check. The servers' side (SDK set-up, SERVER spans, annotations) is ``decisionflow_server.runtime.tracing``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from decisionflow.client_interceptors import AioUnaryUnaryClientInterceptor, UnaryUnaryClientInterceptor

INSTRUMENTATION = "decisionflow"
# Attribute names of the product's own span attributes; each is also a field of the access line.
OPERATION_ID = "decisionflow.operation_id"
CASE_ID = "decisionflow.case_id"
OUTCOME = "decisionflow.outcome"
ATTRIBUTES = {"operation_id": OPERATION_ID, "case_id": CASE_ID, "outcome": OUTCOME}


def recording() -> bool:
    """Return True when an SDK tracer provider is installed (without one, spans are not recorded)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def tracer() -> trace.Tracer:
    """Return the project's tracer."""
    return trace.get_tracer(INSTRUMENTATION)


def rpc_attributes(method: str) -> dict[str, str]:
    """Return the OpenTelemetry RPC attributes of a full method name (``/package.Service/Method``)."""
    service, _, name = method.lstrip("/").partition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


def request_ids(request: object) -> dict[str, str]:
    """Return the operation_id and case_id fields a request message carries (the non-empty ones)."""
    ids: dict[str, str] = {}
    for field in ("operation_id", "case_id"):
        value = getattr(request, field, None)
        if isinstance(value, str) and value:
            ids[field] = value
    return ids


@dataclass(frozen=True, slots=True)
class _CallDetails(grpc.ClientCallDetails):
    method: str
    timeout: float | None
    metadata: Any
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


def _method_name(method: str | bytes) -> str:
    return method.decode() if isinstance(method, bytes) else method


@contextmanager
def _client_span(method: str, request: object) -> Iterator[tuple[trace.Span, list[tuple[str, str | bytes]]]]:
    attributes: dict[str, str] = rpc_attributes(method)
    attributes.update({ATTRIBUTES[k]: v for k, v in request_ids(request).items()})
    with tracer().start_as_current_span(
        method, kind=SpanKind.CLIENT, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield span, list(carrier.items())


def _client_end(span: trace.Span, code: grpc.StatusCode | None) -> None:
    if code is None:
        return
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if code is not grpc.StatusCode.OK:
        span.set_status(Status(StatusCode.ERROR, code.name))


class ClientSpans(UnaryUnaryClientInterceptor):
    """Opens a CLIENT span per unary call of a sync channel and sends its context as ``traceparent``."""

    def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        """Send the call with the span's context in its metadata; the span ends with the call's code."""
        if not recording():
            return continuation(client_call_details, request)
        method = _method_name(client_call_details.method)
        attributes = {**rpc_attributes(method), **{ATTRIBUTES[k]: v for k, v in request_ids(request).items()}}
        span = tracer().start_span(method, kind=SpanKind.CLIENT, attributes=attributes)
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        details = _CallDetails(
            client_call_details.method,
            client_call_details.timeout,
            [*(client_call_details.metadata or ()), *carrier.items()],
            client_call_details.credentials,
            getattr(client_call_details, "wait_for_ready", None),
            getattr(client_call_details, "compression", None),
        )
        try:
            outcome = continuation(details, request)
        except BaseException:
            span.end()
            raise

        # Called at once for a blocking call (already complete), on completion for a future.
        def ended(call: Any) -> None:
            _client_end(span, call.code())
            span.end()

        outcome.add_done_callback(ended)
        return outcome


class AioClientSpans(AioUnaryUnaryClientInterceptor):
    """Opens a CLIENT span per unary call of an asyncio channel and sends its context as ``traceparent``."""

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        """Send the call with the span's context in its metadata; the span ends with the call's code."""
        if not recording():
            return await continuation(client_call_details, request)
        method = _method_name(client_call_details.method)
        with _client_span(method, request) as (span, headers):
            details = grpc.aio.ClientCallDetails(
                method=client_call_details.method,
                timeout=client_call_details.timeout,
                metadata=grpc.aio.Metadata(*(client_call_details.metadata or ()), *headers),
                credentials=client_call_details.credentials,
                wait_for_ready=client_call_details.wait_for_ready,
            )
            call = await continuation(details, request)
            _client_end(span, await call.code())
            return call
