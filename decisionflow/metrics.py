"""Prometheus metrics shared by the services: the gRPC server families of go-grpc-prometheus, an
observer of one method's answers, and the HTTP endpoint that serves a registry (and a health path).

Each service keeps its own ``CollectorRegistry``: several servers in one process (the tests) never
share a series. ``register_process_metrics`` gives each of them the process families
(``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ``process_open_fds``,
``process_start_time_seconds``, ...), ``python_info`` and ``decisionflow_build_info``.

The gRPC families are recorded by ``GrpcServerMetrics.interceptor()``, which
``decisionflow.serving.start_server`` installs outermost, so a call's code is the one its caller
gets: refusals of the status table and of authentication included.
"""

from __future__ import annotations

import errno
import functools
import inspect
import platform
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import grpc
from google.protobuf import descriptor_pool
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    make_wsgi_app,
)
from prometheus_client.exposition import ThreadingWSGIServer

from decisionflow import startup
from decisionflow.errors import DomainError
from decisionflow.handlers import Context, ServerInterceptor, behaviour_of, final_code, with_behaviour
from decisionflow.settings import MetricsSettings
from decisionflow.version import installed_version

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

# go-grpc-prometheus's default buckets (the Prometheus client defaults), so dashboards carry over.
HANDLING_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
HEALTH_PATH = "/healthz"

# Every counter and histogram would also expose a ``_created`` sample (its start time), which no
# rule or panel uses and which doubles what a scrape carries.
disable_created_metrics()  # type: ignore[no-untyped-call]


def register_process_metrics(registry: CollectorRegistry) -> None:
    """Expose on registry the process_* families of the process that scrapes it, python_info, and
    ``decisionflow_build_info{version, python}`` = 1 (what a dashboard joins on to show a deploy)."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    build = Gauge(
        "decisionflow_build_info",
        "Always 1; the labels name the installed decisionflow version and the Python running it",
        ["version", "python"],
        registry=registry,
    )
    build.labels(version=installed_version(), python=platform.python_version()).set(1)


def _split_method(method: str) -> tuple[str, str]:
    """Return (service, method) of a full method path ``/package.Service/Method``."""
    service, _, name = method.lstrip("/").rpartition("/")
    return service or "unknown", name


def _kind_of(request_streaming: bool, response_streaming: bool) -> str:
    if request_streaming and response_streaming:
        return "bidi_stream"
    if request_streaming:
        return "client_stream"
    if response_streaming:
        return "server_stream"
    return "unary"


def _kind(handler: grpc.RpcMethodHandler[Any, Any]) -> str:
    return _kind_of(handler.request_streaming, handler.response_streaming)


@functools.cache
def _declared_kind(service: str, method: str) -> str | None:
    """The method's type as its service declares it: an interceptor may serve a unary method with a
    handler of another shape (authentication refuses without reading the request)."""
    try:
        declared = descriptor_pool.Default().FindMethodByName(f"{service}.{method}")
    except KeyError:
        return None
    return _kind_of(declared.client_streaming, declared.server_streaming)


class GrpcServerMetrics:
    """The go-grpc-prometheus server families on a registry, with the interceptor that records them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["grpc_type", "grpc_service", "grpc_method"]
        self.started = Counter("grpc_server_started", "RPCs started on the server", labels, registry=registry)
        self.handled = Counter(
            "grpc_server_handled",
            "RPCs completed on the server, by the status code the caller got",
            [*labels, "grpc_code"],
            registry=registry,
        )
        self.handling_seconds = Histogram(
            "grpc_server_handling_seconds",
            "Time from the start of an RPC to its answer on the server",
            labels,
            buckets=HANDLING_BUCKETS,
            registry=registry,
        )

    def interceptor(self) -> GrpcMetricsInterceptor:
        """Return the interceptor recording every call of a server on these families."""
        return GrpcMetricsInterceptor(self)


class GrpcMetricsInterceptor(ServerInterceptor):
    """Counts each call as it starts and as it ends (with the final status code) and times it."""

    def __init__(self, metrics: GrpcServerMetrics) -> None:
        self._metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """Return the method's handler with its calls recorded (methods unknown to the server are not)."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        service, method = _split_method(handler_call_details.method)
        labels = (_declared_kind(service, method) or _kind(handler), service, method)
        behaviour = behaviour_of(handler)
        if inspect.isasyncgenfunction(behaviour):
            return with_behaviour(handler, self._streamed(behaviour, labels))
        if inspect.iscoroutinefunction(behaviour):
            return with_behaviour(handler, self._unary(behaviour, labels))
        return handler  # a synchronous behaviour runs on a thread; no server of ours has one

    def _record(
        self, labels: tuple[str, str, str], context: Context, error: BaseException | None, began: float
    ) -> None:
        self._metrics.handled.labels(*labels, final_code(context, error).name).inc()
        self._metrics.handling_seconds.labels(*labels).observe(time.perf_counter() - began)

    def _unary(self, behaviour: Callable[..., Any], labels: tuple[str, str, str]) -> Callable[..., Any]:
        async def recorded(request: Any, context: Context) -> Any:
            self._metrics.started.labels(*labels).inc()
            began = time.perf_counter()
            try:
                response = await behaviour(request, context)
            except BaseException as error:
                self._record(labels, context, error, began)
                raise
            self._record(labels, context, None, began)
            return response

        return recorded

    def _streamed(self, behaviour: Callable[..., Any], labels: tuple[str, str, str]) -> Callable[..., Any]:
        async def recorded(request: Any, context: Context) -> AsyncIterator[Any]:
            self._metrics.started.labels(*labels).inc()
            began = time.perf_counter()
            try:
                async for response in behaviour(request, context):
                    yield response
            except BaseException as error:
                self._record(labels, context, error, began)
                raise
            self._record(labels, context, None, began)

        return recorded


OnAnswer = Callable[[Any], None]
OnRefusal = Callable[[DomainError], None]


class ObserveAnswers(ServerInterceptor):
    """Hands each answer of chosen unary methods (the response message, or the domain error that
    refuses it) to a callback; installed inside the status mapping, so it sees the error itself."""

    def __init__(self, answers: Mapping[str, OnAnswer], refusals: Mapping[str, OnRefusal] | None = None) -> None:
        self._answers = dict(answers)
        self._refusals = dict(refusals or {})

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """Return the handler, wrapped when its method is observed."""
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or (method not in self._answers and method not in self._refusals):
            return handler
        behaviour = behaviour_of(handler)
        if _kind(handler) != "unary" or not inspect.iscoroutinefunction(behaviour):
            return handler
        on_answer = self._answers.get(method)
        on_refusal = self._refusals.get(method)

        async def observed(request: Any, context: Context) -> Any:
            try:
                response = await behaviour(request, context)
            except DomainError as error:
                if on_refusal is not None:
                    on_refusal(error)
                raise
            if on_answer is not None:
                on_answer(response)
            return response

        return with_behaviour(handler, observed)


class _QuietHandler(WSGIRequestHandler):
    """Answers scrapes without writing a log line per request to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        """Write nothing."""


def _metrics_app(registry: CollectorRegistry, healthy: Callable[[], bool] | None) -> WSGIApplication:
    metrics = make_wsgi_app(registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if healthy is not None and environ.get("PATH_INFO") == HEALTH_PATH:
            serving = healthy()
            status = "200 OK" if serving else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [b"SERVING\n" if serving else b"NOT_SERVING\n"]
        scrape: Iterable[bytes] = metrics(environ, start_response)
        return scrape

    return app


class MetricsServer:
    """The HTTP endpoint of one registry (``/metrics``, and ``/healthz`` when given a health check),
    served from a daemon thread."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @classmethod
    def start(
        cls,
        registry: CollectorRegistry,
        port: int,
        address: str = "127.0.0.1",
        *,
        healthy: Callable[[], bool] | None = None,
    ) -> MetricsServer:
        """Serve registry on address:port (0 picks a free port); raise OSError when it cannot bind."""
        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]

        class Server(ThreadingWSGIServer):
            address_family = family

        server = make_server(address, port, _metrics_app(registry, healthy), Server, handler_class=_QuietHandler)
        thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
        thread.start()
        return cls(server, thread)

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_port)

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_metrics(
    registry: CollectorRegistry,
    port: int,
    address: str,
    settings: MetricsSettings,
    *,
    healthy: Callable[[], bool] | None = None,
) -> MetricsServer:
    """Start the metrics endpoint of a service; an address that cannot be bound raises a StartupError
    naming the metrics settings (exit 1 when the port is in use, 2 when the setting is wrong)."""
    try:
        return MetricsServer.start(registry, port, address, healthy=healthy)
    except OSError as exc:
        make = startup.runtime_error if exc.errno == errno.EADDRINUSE else startup.configuration_error
        cause = exc.strerror or startup.describe(exc)
        raise make(f"cannot serve metrics on {address}:{port}", settings.all, cause) from exc
