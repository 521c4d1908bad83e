"""gRPC server bootstrap shared by the services: message limits, the server's status table, health,
reflection and a graceful shutdown (health NOT_SERVING first, then drain calls in flight). The
process around the server (start-up order, workers, signals) is decisionflow_server.runtime.host."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import descriptor_pool
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from decisionflow.channels import MAX_MESSAGE_BYTES
from decisionflow_server.foundation.settings import (
    Network,
    SettingValues,
    TransportSettings,
    parse_settings,
    part,
    transport_settings,
)
from decisionflow_server.runtime.auth import EXEMPT_METHOD_PREFIXES, AuthInterceptor
from decisionflow_server.runtime.connection_guard import ConnectionGuard, ConnectionRules
from decisionflow_server.runtime.reflection import enable_reflection
from decisionflow_server.runtime.rpc_errors import StatusTable
from decisionflow_server.runtime.served_calls import Observers, ServedCalls

# A method without a size of its own receives at most this (ids, page tokens, a decision).
DEFAULT_RECEIVE_BYTES = 64 * 1024
# Clients may ping an idle connection no more often than this; a third ping sooner is answered
# with GOAWAY (ENHANCE_YOUR_CALM).
MIN_CLIENT_PING_INTERVAL_MS = 30_000
MAX_PING_STRIKES = 2
# The server pings a connection silent this long, and drops it if no answer comes within the timeout.
KEEPALIVE_TIME_MS = 120_000
KEEPALIVE_TIMEOUT_MS = 20_000
# A call's metadata, counted as HTTP/2 counts a header list (name, value and 32 bytes per entry):
# gRPC core refuses a share of calls above the soft limit and every call above the hard one, which it
# advertises as SETTINGS_MAX_HEADER_LIST_SIZE (RESOURCE_EXHAUSTED). These are gRPC's defaults, stated
# so that the server's own check (decisionflow_server.runtime.served_calls) uses the same figure. gRPC applies them
# only once the peer has acknowledged the server's SETTINGS; until then a request's metadata may
# reach 16 MiB, and of requests sent before that (7 KB on the wire: a 4,000-byte header named 3,000
# times through HPACK, 12 MB decoded) about a quarter reached the service whole. No core argument
# closes that window: with these limits at 16 or 4 KiB, an HPACK decoder table of 0 or a SETTINGS ack
# timeout of 1 s, 12 rounds of 30 such requests still took an orchestrator from 100 MiB to a peak of
# 289-316 MiB, as with the defaults (298); 4 KiB also refused a legitimate call with a 4 KiB header
# (bench/hpack.py, docs/security.md). Legitimate calls carry a bearer token, a traceparent and gRPC's
# own headers: well under the soft limit.
MAX_METADATA_SOFT_BYTES = 8 * 1024
MAX_METADATA_BYTES = 16 * 1024

if TYPE_CHECKING:
    # Type only: decisionflow_server.runtime.metrics imports start-up code that imports this module.
    from decisionflow_server.runtime.metrics import GrpcServerMetrics

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
    """What one peer may hold of a server: streams per connection, connection lifetime, connections. The
    defaults are the settings' (``transport_settings``), read by ``defaults()``: declared once, there."""

    max_concurrent_streams: int
    max_connection_idle_seconds: float
    max_connection_age_seconds: float
    max_connection_age_grace_seconds: float
    max_connections: int
    max_connections_per_peer: int | None  # None: half of max_connections
    max_unauthenticated_connections: int | None  # None: three quarters of max_connections
    first_call_timeout_seconds: float
    trusted_peer_addresses: tuple[Network, ...] = ()

    @classmethod
    def defaults(cls) -> TransportLimits:
        """The limits a server has when none of its transport settings is given."""
        declared = transport_settings("ANY")
        return cls.from_values(parse_settings(argparse.Namespace(), declared.all, {}), declared)

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
            values[settings.max_unauthenticated_connections],
            values.required(settings.first_call_timeout_seconds),
            values[settings.trusted_peer_addresses] or (),
        )

    @classmethod
    def from_settings(cls, settings: TransportSettings) -> TransportLimits:
        """A configuration field (``settings.part``) holding the limits a server's transport settings give."""
        return part(settings.all, lambda values: cls.from_values(values, settings))

    @property
    def connection_rules(self) -> ConnectionRules:
        """The rules the server's connection guard enforces (decisionflow_server.runtime.connection_guard)."""
        per_peer = self.max_connections_per_peer or max(1, self.max_connections // 2)
        unauthenticated = self.max_unauthenticated_connections or max(1, self.max_connections * 3 // 4)
        return ConnectionRules(self.first_call_timeout_seconds, per_peer, unauthenticated, self.trusted_peer_addresses)

    def server_options(self, receive: ReceiveLimits, *, reuse_port: bool = False) -> list[tuple[str, int]]:
        """Return the gRPC core arguments that enforce these limits and the receive limit; reuse_port lets
        sibling worker processes bind the same port (otherwise a second server on it fails to start)."""
        return [
            ("grpc.max_receive_message_length", receive.largest),
            ("grpc.max_send_message_length", 16 * MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", int(reuse_port)),
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
            ("grpc.max_metadata_size", MAX_METADATA_SOFT_BYTES),
            ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
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
    TransportLimits.defaults().server_options(ReceiveLimits(default=MAX_MESSAGE_BYTES))
)


# The status details a refusal carries; reflection serves their files so that a reflection client
# (grpcurl, buf curl) can decode the details, not only the request and response messages.
STATUS_DETAIL_FILES = (status_pb2.DESCRIPTOR, error_details_pb2.DESCRIPTOR)


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
    auth: AuthInterceptor | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor[Any, Any]] = (),
    credentials: grpc.ServerCredentials | None = None,
    transport: TransportLimits | None = None,
    receive: ReceiveLimits | None = None,
    metrics: GrpcServerMetrics | None = None,
    observers: Observers | None = None,
    reuse_port: bool = False,
) -> RunningServer:
    """Start an aio server on address (port 0 picks a free one); register adds the servicers and
    returns their full service names, which health and reflection then announce. Every call is served
    in one pass (decisionflow_server.runtime.served_calls): counted on metrics, traced, refused above the metadata
    limit (MAX_METADATA_BYTES), admitted by auth (None: every
    caller is anonymous; health and reflection are exempt), parsed within receive (default 1 MiB for
    every method), handed to observers, and any domain error raised on the way answered through
    status_table. interceptors run inside that pass, around the servicers (fault injection).
    transport bounds what a peer may hold (default TransportLimits.defaults()). reuse_port: worker processes
    share the port (decisionflow_server.runtime.workers)."""
    transport = transport or TransportLimits.defaults()
    receive = receive or ReceiveLimits(default=MAX_MESSAGE_BYTES)
    guard = ConnectionGuard(
        transport.connection_rules,
        on_ban=None if metrics is None else metrics.peer_address_bans.inc,
    )
    served = ServedCalls(
        status_table,
        auth=auth,
        metrics=metrics,
        observers=observers,
        receive_limit=receive.for_method,
        exempt=EXEMPT_METHOD_PREFIXES,
        on_admitted=guard.note_call,
        inner=interceptors,
        metadata_limit=MAX_METADATA_BYTES,
    )
    server = grpc.aio.server(
        interceptors=[served],
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
