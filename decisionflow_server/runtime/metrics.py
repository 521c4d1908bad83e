"""Prometheus metrics shared by the services: the gRPC server families of go-grpc-prometheus and
the HTTP endpoint that serves a registry (and a health path, and any read-only files a service
publishes there: the orchestrator's audit checkpoint).

Each service keeps its own ``CollectorRegistry``: several servers in one process (the tests) never
share a series. ``register_process_metrics`` gives each of them the process families
(``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ``process_open_fds``,
``process_start_time_seconds``, ...), ``python_info`` and ``decisionflow_build_info``.

The gRPC families are recorded by the server's one pass per call (``decisionflow_server.runtime.served_calls``),
outside the status mapping, so a call's code is the one its caller gets: refusals of the status
table and of authentication included.
"""

from __future__ import annotations

import errno
import functools
import platform
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
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

from decisionflow_server.foundation import startup_errors
from decisionflow_server.foundation.settings import MetricsSettings
from decisionflow_server.foundation.version import installed_version

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


class MethodMetrics:
    """The go-grpc-prometheus children of one method, resolved once: a call only increments them."""

    def __init__(self, families: GrpcServerMetrics, labels: tuple[str, str, str]) -> None:
        self._families = families
        self._labels = labels
        self.started = families.started.labels(*labels)
        self._handling = families.handling_seconds.labels(*labels)
        self._handled: dict[grpc.StatusCode, Any] = {}

    def finished(self, code: grpc.StatusCode, seconds: float) -> None:
        """Count one call of the method as handled with code, seconds after it started."""
        handled = self._handled.get(code)
        if handled is None:
            handled = self._handled[code] = self._families.handled.labels(*self._labels, code.name)
        handled.inc()
        self._handling.observe(seconds)


class GrpcServerMetrics:
    """The go-grpc-prometheus server families on a registry (``method`` gives one method's children), and
    the count of peer addresses the server's connection guard banned."""

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
        self.peer_address_bans = Counter(
            "decisionflow_peer_address_bans",
            "Peer addresses refused new connections at the listening socket for holding connections without "
            "an authenticated call beyond their share; a renewal is not counted",
            registry=registry,
        )

    def method(self, full_method: str, handler: grpc.RpcMethodHandler[Any, Any]) -> MethodMetrics:
        """Return the children of full_method (``/package.Service/Method``), labelled with the type its
        service declares (an interceptor may serve a unary method with a handler of another shape)."""
        service, method = _split_method(full_method)
        return MethodMetrics(self, (_declared_kind(service, method) or _kind(handler), service, method))


class _QuietHandler(WSGIRequestHandler):
    """Answers scrapes without writing a log line per request to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        """Write nothing."""


# A published file: its path, and a read of its bytes (None: not published yet, 404).
PublishedFiles = Mapping[str, Callable[[], bytes | None]]


def _published_file(
    read: Callable[[], bytes | None], environ: WSGIEnvironment, start_response: StartResponse
) -> Iterable[bytes]:
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"), ("Content-Type", "text/plain")])
        return [b"read-only\n"]
    body = read()
    if body is None:
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not published yet\n"]
    # A reader polls for the newest: no cache may answer for the file.
    headers = [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-cache")]
    start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
    return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]


def _metrics_app(
    registry: CollectorRegistry, healthy: Callable[[], bool] | None, files: PublishedFiles
) -> WSGIApplication:
    metrics = make_wsgi_app(registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        published = files.get(environ.get("PATH_INFO", ""))
        if published is not None:
            return _published_file(published, environ, start_response)
        if healthy is not None and environ.get("PATH_INFO") == HEALTH_PATH:
            serving = healthy()
            status = "200 OK" if serving else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [b"SERVING\n" if serving else b"NOT_SERVING\n"]
        scrape: Iterable[bytes] = metrics(environ, start_response)
        return scrape

    return app


class MetricsServer:
    """The HTTP endpoint of one registry (``/metrics``, ``/healthz`` when given a health check, and the
    files given), served from a daemon thread."""

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
        files: PublishedFiles | None = None,
    ) -> MetricsServer:
        """Serve registry on address:port (0 picks a free port), and each of files (GET or HEAD) at its path;
        raise OSError when it cannot bind."""
        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]

        class Server(ThreadingWSGIServer):
            address_family = family

        app = _metrics_app(registry, healthy, files or {})
        server = make_server(address, port, app, Server, handler_class=_QuietHandler)
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
    files: PublishedFiles | None = None,
) -> MetricsServer:
    """Start the metrics endpoint of a service; an address that cannot be bound raises a StartupError
    naming the metrics settings (exit 1 when the port is in use, 2 when the setting is wrong)."""
    try:
        return MetricsServer.start(registry, port, address, healthy=healthy, files=files)
    except OSError as exc:
        make = startup_errors.runtime_error if exc.errno == errno.EADDRINUSE else startup_errors.configuration_error
        cause = exc.strerror or startup_errors.describe(exc)
        raise make(f"cannot serve metrics on {address}:{port}", settings.all, cause) from exc
