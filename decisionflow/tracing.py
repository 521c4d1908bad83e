"""OpenTelemetry traces with W3C trace context, off unless ``OTEL_TRACES_EXPORTER`` names an exporter.

``configure`` is the only place a service sets up the SDK: with the variable unset (or ``none``) it
imports no SDK, creates no exporter and leaves the API's no-op tracer in place, so the interceptors
below cost one check per call. When it is set, the SDK reads the standard variables itself:
``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (the resource), ``OTEL_TRACES_SAMPLER`` and
``OTEL_TRACES_SAMPLER_ARG`` (the sampler), ``OTEL_BSP_*`` (the batch processor) and
``OTEL_EXPORTER_OTLP_*`` / ``OTEL_EXPORTER_OTLP_TRACES_*`` (endpoint, TLS, headers, timeout).
``OTEL_PROPAGATORS`` (default ``tracecontext,baggage``) chooses what travels in call metadata.

Server side, ``server_span`` opens a SERVER span per call from the caller's ``traceparent``
(``decisionflow.access.ObservedCalls`` uses it); client side, ``ClientSpans`` and ``AioClientSpans``
open a CLIENT span per call and inject its context into the call's metadata. ``annotate`` names
the operation, case and outcome on the current span and the current call's access line.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from decisionflow.handlers import AioUnaryUnaryClientInterceptor, UnaryUnaryClientInterceptor

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

INSTRUMENTATION = "decisionflow"
EXPORTER_VARIABLE = "OTEL_TRACES_EXPORTER"
# The short names the OpenTelemetry SDK documents, mapped to the exporters' entry-point names.
_EXPORTER_ALIASES = {"otlp": "otlp_proto_grpc"}
# Attribute names of the product's own span attributes; each is also a field of the access line.
OPERATION_ID = "decisionflow.operation_id"
CASE_ID = "decisionflow.case_id"
OUTCOME = "decisionflow.outcome"
_ATTRIBUTES = {"operation_id": OPERATION_ID, "case_id": CASE_ID, "outcome": OUTCOME}

_provider: TracerProvider | None = None
# The ids and outcome noted during the call being served; the access line reads them at its end.
_call_notes: contextvars.ContextVar[MutableMapping[str, str] | None] = contextvars.ContextVar(
    "decisionflow_call_notes", default=None
)

# The SERVER span of the call being served: the one annotate names, even from inside a span the
# workflow framework opened around a step.
_call_span: contextvars.ContextVar[trace.Span | None] = contextvars.ContextVar("decisionflow_call_span", default=None)


class TracingConfigError(ValueError):
    """An OTEL_* variable names an exporter that is not installed."""


def _exporter_names(environ: Mapping[str, str]) -> list[str]:
    names = [n.strip().lower() for n in environ.get(EXPORTER_VARIABLE, "").split(",") if n.strip()]
    return [n for n in names if n != "none"]


def configure(service_name: str, environ: Mapping[str, str]) -> bool:
    """Install an SDK tracer provider exporting through the exporters environ's OTEL_TRACES_EXPORTER names,
    batched; return False (and import no SDK) when it names none. The SDK reads every other OTEL_*
    variable from the process environment itself; service_name applies unless OTEL_SERVICE_NAME or
    OTEL_RESOURCE_ATTRIBUTES name one. An exporter that is not installed raises TracingConfigError."""
    global _provider  # noqa: PLW0603  the process has one tracer provider, as the API has one global
    names = _exporter_names(environ)
    if not names or _provider is not None:
        return _provider is not None
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporters = []
    for name in names:
        found = entry_points(group="opentelemetry_traces_exporter", name=_EXPORTER_ALIASES.get(name, name))
        if not found:
            raise TracingConfigError(f"{EXPORTER_VARIABLE}: no trace exporter named {name!r} is installed")
        exporters.append(next(iter(found)).load())
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    # The sampler comes from OTEL_TRACES_SAMPLER; each exporter and the processor read their own variables.
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter()))
    trace.set_tracer_provider(provider)
    _provider = provider
    return True


def configure_or_exit(program: str, service_name: str, environ: Mapping[str, str]) -> None:
    """configure(), or end the process with a one-line error and status 2 (a bad setting) when it refuses."""
    try:
        configure(service_name, environ)
    except TracingConfigError as error:
        _exit_usage(f"{program}: {error}")


def _exit_usage(line: str) -> NoReturn:
    sys.stderr.write(line + "\n")
    sys.exit(2)


def shutdown() -> None:
    """Export every span still queued and stop the exporters (a no-op when tracing is off)."""
    global _provider
    provider, _provider = _provider, None
    if provider is not None:
        provider.shutdown()


def _recording() -> bool:
    # Without an SDK provider the API hands out non-recording spans: skip the work altogether.
    return _provider is not None or not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    )


def _tracer() -> trace.Tracer:
    return trace.get_tracer(INSTRUMENTATION)


def _rpc_attributes(method: str) -> dict[str, str]:
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


@contextmanager
def call_notes() -> Iterator[MutableMapping[str, str]]:
    """Collect what ``annotate`` notes during one served call (ids, outcome, principal)."""
    notes: MutableMapping[str, str] = {}
    token = _call_notes.set(notes)
    try:
        yield notes
    finally:
        _call_notes.reset(token)


def annotate(**fields: str) -> None:
    """Note operation_id, case_id, outcome (or principal) on the served call's span (else the current one)
    and its access line; cheap when neither exists."""
    notes = _call_notes.get()
    if notes is not None:
        notes.update({k: v for k, v in fields.items() if v})
    span = _call_span.get() or trace.get_current_span()
    if span.is_recording():
        span.set_attributes({_ATTRIBUTES[k]: v for k, v in fields.items() if v and k in _ATTRIBUTES})


@contextmanager
def server_span(method: str, metadata: Sequence[tuple[str, str | bytes]] | None) -> Iterator[trace.Span | None]:
    """Open a SERVER span named method, the child of the caller's traceparent; yield None when tracing is off."""
    if not _recording():
        yield None
        return
    carrier = {key: value for key, value in (metadata or ()) if isinstance(value, str)}
    parent = propagate.extract(carrier)
    with _tracer().start_as_current_span(
        method,
        context=parent,
        kind=SpanKind.SERVER,
        attributes=_rpc_attributes(method),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        token = _call_span.set(span)
        try:
            yield span
        finally:
            _call_span.reset(token)


def end_status(span: trace.Span | None, code: grpc.StatusCode, details: str = "") -> None:
    """Set the span's gRPC status attribute and its status: ERROR for a server fault, else unset."""
    if span is None:
        return
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if code in SERVER_FAULTS:
        span.set_status(Status(StatusCode.ERROR, f"{code.name}: {details}" if details else code.name))


# The codes that mean the server failed (OpenTelemetry's gRPC conventions mark these as span errors on
# a server; a refusal such as NOT_FOUND or FAILED_PRECONDITION is the server working as designed).
SERVER_FAULTS: frozenset[grpc.StatusCode] = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


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
    attributes: dict[str, str] = _rpc_attributes(method)
    attributes.update({_ATTRIBUTES[k]: v for k, v in request_ids(request).items()})
    with _tracer().start_as_current_span(
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
        if not _recording():
            return continuation(client_call_details, request)
        method = _method_name(client_call_details.method)
        attributes = {**_rpc_attributes(method), **{_ATTRIBUTES[k]: v for k, v in request_ids(request).items()}}
        span = _tracer().start_span(method, kind=SpanKind.CLIENT, attributes=attributes)
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
        if not _recording():
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
