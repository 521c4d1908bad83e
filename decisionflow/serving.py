"""gRPC server bootstrap shared by the services: message limits, the server's status table, health,
reflection and a graceful shutdown (health NOT_SERVING first, then drain calls in flight). The
process around the server (start-up order, workers, signals) is decisionflow.host."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import descriptor_pool
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from decisionflow.access import NotedCalls, ObservedCalls
from decisionflow.addresses import is_loopback
from decisionflow.channels import MAX_MESSAGE_BYTES
from decisionflow.connection_guard import ConnectionGuard, ConnectionRules
from decisionflow.errors import FieldViolation, InvalidRequest
from decisionflow.reflection import enable_reflection
from decisionflow.rpc_errors import RefusalsAsStatus, StatusTable
from decisionflow.settings import SettingValues, TransportSettings

# A method without a size of its own receives at most this (ids, page tokens, a decision).
DEFAULT_RECEIVE_BYTES = 64 * 1024
# Clients may ping an idle connection no more often than this; a third ping sooner is answered
# with GOAWAY (ENHANCE_YOUR_CALM).
MIN_CLIENT_PING_INTERVAL_MS = 30_000
MAX_PING_STRIKES = 2
# The server pings a connection silent this long, and drops it if no answer comes within the timeout.
KEEPALIVE_TIME_MS = 120_000
KEEPALIVE_TIMEOUT_MS = 20_000

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReceiveLimits:
    """The largest request message each method accepts, in bytes: sized to its largest valid
    request, so nothing bigger is ever parsed, nor (above ``largest``) buffered by gRPC."""

    per_method: Mapping[str, int] = field(default_factory=dict)
    default: int = DEFAULT_RECEIVE_BYTES

    def for_method(self, method: str) -> int:
        """Return the receive limit of method (its full path, /package.Service/Method)."""
        return self.per_method.get(method, self.default)

    @property
    def largest(self) -> int:
        """The largest limit of any method: the server's receive limit for a whole message."""
        return max((self.default, *self.per_method.values()))


@dataclass(frozen=True, slots=True)
class TransportLimits:
    """What one peer may hold of a server: streams per connection, connection lifetime, connections."""

    max_concurrent_streams: int = 64
    max_connection_idle_seconds: float = 300.0
    max_connection_age_seconds: float = 1800.0
    max_connection_age_grace_seconds: float = 30.0
    max_connections: int = 1000
    max_connections_per_peer: int | None = None  # None: half of max_connections
    first_call_timeout_seconds: float = 10.0

    @classmethod
    def from_values(cls, values: SettingValues, settings: TransportSettings) -> TransportLimits:
        """Return the limits from parsed setting values."""
        return cls(
            values.required(settings.max_concurrent_streams),
            values.required(settings.max_connection_idle_seconds),
            values.required(settings.max_connection_age_seconds),
            values.required(settings.max_connection_age_grace_seconds),
            values.required(settings.max_connections),
            values[settings.max_connections_per_peer],
            values.required(settings.first_call_timeout_seconds),
        )

    @property
    def connection_rules(self) -> ConnectionRules:
        """The rules the server's connection guard enforces (decisionflow.connection_guard)."""
        per_peer = self.max_connections_per_peer or max(1, self.max_connections // 2)
        return ConnectionRules(self.first_call_timeout_seconds, per_peer)

    def server_options(self, receive: ReceiveLimits, *, reuse_port: bool = False) -> list[tuple[str, int]]:
        """Return the gRPC core arguments that enforce these limits and the receive limit; reuse_port lets
        sibling worker processes bind the same port (otherwise a second server on it fails to start)."""
        return [
            ("grpc.max_receive_message_length", receive.largest),
            ("grpc.max_send_message_length", 16 * MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", int(reuse_port)),
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
            ("grpc.max_connection_idle_ms", _millis(self.max_connection_idle_seconds)),
            ("grpc.max_connection_age_ms", _millis(self.max_connection_age_seconds)),
            ("grpc.max_connection_age_grace_ms", _millis(self.max_connection_age_grace_seconds)),
            ("grpc.max_allowed_incoming_connections", self.max_connections),
            # A connection that never completes the HTTP/2 handshake (no SETTINGS) is closed as one
            # that makes no call would be.
            ("grpc.server_handshake_timeout_ms", _millis(self.first_call_timeout_seconds)),
            ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
            ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
            ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ]


def _millis(seconds: float) -> int:
    # gRPC core takes a C int of milliseconds; a longer time is as good as never.
    return min(max(1, round(seconds * 1000)), 2**31 - 1)


SERVER_OPTIONS: Sequence[tuple[str, int]] = tuple(
    TransportLimits().server_options(ReceiveLimits(default=MAX_MESSAGE_BYTES))
)


class ExposureRefused(ValueError):
    """A server was asked to listen beyond loopback without TLS and authentication."""


def check_exposure(address: str, *, tls: bool, authenticated: bool) -> None:
    """Refuse to listen beyond loopback unless both TLS and authentication are configured."""
    if not is_loopback(address) and not (tls and authenticated):
        raise ExposureRefused(f"refusing to listen on {address}: beyond loopback a server needs TLS and authentication")


# The status details a refusal carries; reflection serves their files so that a reflection client
# (grpcurl, buf curl) can decode the details, not only the request and response messages.
STATUS_DETAIL_FILES = (status_pb2.DESCRIPTOR, error_details_pb2.DESCRIPTOR)


class DecodeRequests(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Parses each unary request inside the call, so bytes that are not the request message, or
    more bytes than the method's largest valid request, are refused as an InvalidRequest (gRPC
    itself answers UNKNOWN when its deserializer raises)."""

    def __init__(self, limits: ReceiveLimits | None = None) -> None:
        self._limits = limits or ReceiveLimits(default=MAX_MESSAGE_BYTES)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        """Return the handler with parsing moved from gRPC's deserializer into its behaviour."""
        handler = await continuation(handler_call_details)
        if (
            handler is None
            or handler.request_streaming
            or handler.response_streaming
            or handler.request_deserializer is None
            or not inspect.iscoroutinefunction(handler.unary_unary)
        ):
            return handler
        parse, behaviour = handler.request_deserializer, handler.unary_unary
        limit = self._limits.for_method(handler_call_details.method)

        async def parsed(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if len(request) > limit:
                raise InvalidRequest(
                    [FieldViolation("request", f"{len(request)} bytes; this method accepts at most {limit}")]
                )
            try:
                message = parse(request)
            except Exception as exc:  # whatever the parser raises, the bytes are not a request
                raise InvalidRequest([FieldViolation("request", "not a well-formed request message")]) from exc
            return await behaviour(message, context)

        return grpc.unary_unary_rpc_method_handler(parsed, response_serializer=handler.response_serializer)


@dataclass
class RunningServer:
    """A started server, the port it bound and its health servicer."""

    server: grpc.aio.Server
    port: int
    health: HealthServicer
    service_names: tuple[str, ...]
    guard: ConnectionGuard

    async def stop(self, grace: float) -> None:
        """Report NOT_SERVING, then stop accepting calls and let those in flight finish within grace."""
        await self.guard.stop()
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


async def start_server(
    address: str,
    register: Callable[[grpc.aio.Server], Sequence[str]],
    *,
    status_table: StatusTable,
    interceptors: Sequence[grpc.aio.ServerInterceptor[Any, Any]] = (),
    credentials: grpc.ServerCredentials | None = None,
    transport: TransportLimits | None = None,
    receive: ReceiveLimits | None = None,
    observers: Sequence[grpc.aio.ServerInterceptor[Any, Any]] = (),
    reuse_port: bool = False,
) -> RunningServer:
    """Start an aio server on address (port 0 picks a free one); register adds the servicers and
    returns their full service names, which health and reflection then announce. Every domain
    error raised in a call, by a servicer or an interceptor, is answered through status_table.
    transport and receive bound what a peer may hold (defaults: TransportLimits(), and 1 MiB for
    every method). observers see every call from outside the status mapping, so they read the code
    the caller gets (metrics). reuse_port: worker processes share the port (decisionflow.workers)."""
    transport = transport or TransportLimits()
    receive = receive or ReceiveLimits(default=MAX_MESSAGE_BYTES)
    # The status mapping is outermost but for the access line and span, which see its final code,
    # so it also answers the refusals of the interceptors (authentication, request parsing);
    # parsing is innermost, so a caller is authenticated before its bytes are parsed; then the
    # principal and the parsed request are noted for the access line.
    guard = ConnectionGuard(transport.connection_rules)
    server = grpc.aio.server(
        interceptors=[
            *observers,
            ObservedCalls(),
            RefusalsAsStatus(status_table),
            *interceptors,
            DecodeRequests(receive),
            NotedCalls(on_admitted=guard.note_call),
        ],
        options=transport.server_options(receive, reuse_port=reuse_port),
    )
    service_names = tuple(register(server))
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    # The default pool holds every generated module imported so far: the services' own files and
    # STATUS_DETAIL_FILES, imported above.
    enable_reflection(
        (*service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name),
        server,
        pool=descriptor_pool.Default(),
    )
    port = server.add_insecure_port(address) if credentials is None else server.add_secure_port(address, credentials)
    if port == 0:
        raise OSError(f"could not bind {address}")
    await server.start()
    guard.watch(port)
    for name in (*service_names, ""):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server, port, health, service_names, guard)
