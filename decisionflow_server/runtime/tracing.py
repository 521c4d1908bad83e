"""OpenTelemetry traces with W3C trace context, off unless ``OTEL_TRACES_EXPORTER`` names an exporter.

``configure`` is the only place a service sets up the SDK: with the variable unset (or ``none``) it
imports no SDK, creates no exporter and leaves the API's no-op tracer in place, so the interceptors
below cost one check per call. When it is set, the SDK reads the standard variables itself:
``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (the resource), ``OTEL_TRACES_SAMPLER`` and
``OTEL_TRACES_SAMPLER_ARG`` (the sampler), ``OTEL_BSP_*`` (the batch processor) and
``OTEL_EXPORTER_OTLP_*`` / ``OTEL_EXPORTER_OTLP_TRACES_*`` (endpoint, TLS, headers, timeout).
``OTEL_PROPAGATORS`` (default ``tracecontext,baggage``) chooses what travels in call metadata.

Server side, ``server_span`` opens a SERVER span per call from the caller's ``traceparent``
(``decisionflow_server.runtime.served_calls`` uses it); client side, ``decisionflow.client_tracing`` (in
the client distribution) opens a CLIENT span per call and injects its context into the call's
metadata. ``annotate`` names the operation, case and outcome on the current span and the current
call's access line.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, NoReturn

import grpc
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from decisionflow.client_tracing import (
    ATTRIBUTES,
    recording,
    rpc_attributes,
    tracer,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

EXPORTER_VARIABLE = "OTEL_TRACES_EXPORTER"
# The short names the OpenTelemetry SDK documents, mapped to the exporters' entry-point names.
_EXPORTER_ALIASES = {"otlp": "otlp_proto_grpc"}

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


def configure_or_exit(program: str, service_name: str, environ: Mapping[str, str]) -> bool:
    """configure() and return what it returns, or end the process with a one-line error and status 2
    (a bad setting) when it refuses."""
    try:
        return configure(service_name, environ)
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
    return _provider is not None or recording()


@contextmanager
def call_notes() -> Iterator[MutableMapping[str, str]]:
    """Collect what ``annotate`` notes during one served call (ids, outcome, principal)."""
    notes: MutableMapping[str, str] = {}
    token = _call_notes.set(notes)
    try:
        yield notes
    finally:
        _call_notes.reset(token)


def in_served_call() -> bool:
    """True inside a call a server is serving: what ``annotate`` notes reaches its access line."""
    return _call_notes.get() is not None


def annotate(**fields: str) -> None:
    """Note operation_id, case_id, outcome (or principal) on the served call's span (else the current one)
    and its access line; cheap when neither exists."""
    notes = _call_notes.get()
    if notes is not None:
        notes.update({k: v for k, v in fields.items() if v})
    span = _call_span.get() or trace.get_current_span()
    if span.is_recording():
        span.set_attributes({ATTRIBUTES[k]: v for k, v in fields.items() if v and k in ATTRIBUTES})


def note_refusal(reason: str, detail: str, ids: Mapping[str, str]) -> None:
    """Note on the served call's access line why it was refused, and those of ids (principal,
    operation, case, checkpoint) the call has not noted itself; nothing outside a served call."""
    notes = _call_notes.get()
    if notes is None:
        return
    notes.update(reason=reason, detail=detail)
    for name, value in ids.items():
        if value:
            notes.setdefault(name, value)


@contextmanager
def server_span(method: str, metadata: Sequence[tuple[str, str | bytes]] | None) -> Iterator[trace.Span | None]:
    """Open a SERVER span named method, the child of the caller's traceparent; yield None when tracing is off."""
    if not _recording():
        yield None
        return
    carrier = {key: value for key, value in (metadata or ()) if isinstance(value, str)}
    parent = propagate.extract(carrier)
    with tracer().start_as_current_span(
        method,
        context=parent,
        kind=SpanKind.SERVER,
        attributes=rpc_attributes(method),
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
