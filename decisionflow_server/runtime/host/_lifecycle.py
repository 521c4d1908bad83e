"""A server's life in one process: what it opens at start, in order, and closes at stop, in reverse.

``Host.start`` runs the steps every service shares, each one's clean-up pushed on one
``AsyncExitStack``, so a step that fails closes what the steps before it opened:

1. the security parts (credentials file, TLS files, the OIDC issuer's keys fetched once; exposure
   beyond loopback refused);
2. the service's own configuration checks (``check``), before anything is opened;
3. the address, bound once as the server will bind it;
4. the database engine;
5. the metrics endpoint, when a metrics port is set;
6. the schema, migrated (``--migrate auto``) or checked (``off``); a newer schema whose compatibility
   record admits this release is used as it is (``decisionflow_server.storage.migrating``);
7. the service's parts (``build``): store, use cases, servicers, the clients it calls, each pushing
   its own clean-up on the host (``Host.close_on_stop``, ``Host.engine``);
8. the gRPC server: the service's status table, authentication, the service's interceptors, its
   answer counters, its receive limits and the metrics observers (decisionflow_server.runtime.serving);
9. the service's background jobs.

``Host.stop`` unwinds the stack: the jobs stop, health answers NOT_SERVING, the calls in flight
drain within the grace, then what the service built, the metrics endpoint and the engine close.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, Self, TypeAlias, TypeVar

import grpc
from sqlalchemy.engine import Engine

from decisionflow_server.foundation import logs
from decisionflow_server.foundation.settings import Setting
from decisionflow_server.runtime import server_security, startup
from decisionflow_server.runtime.metrics import GrpcServerMetrics, MetricsServer
from decisionflow_server.runtime.rpc_errors import StatusTable
from decisionflow_server.runtime.served_calls import Observers
from decisionflow_server.runtime.server_security import ServerSecurity
from decisionflow_server.runtime.serving import ReceiveLimits, RunningServer, TransportLimits, start_server
from decisionflow_server.storage import migrating

if TYPE_CHECKING:
    Interceptor: TypeAlias = grpc.aio.ServerInterceptor[Any, Any]  # generic only in the type stubs


class ServerConfig(Protocol):
    """The settings every server has (a frozen dataclass: worker processes get a copy with their address)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def address(self) -> str: ...
    @property
    def database_url(self) -> str: ...
    @property
    def migrate_at_start(self) -> bool: ...
    @property
    def security(self) -> ServerSecurity: ...
    @property
    def transport(self) -> TransportLimits: ...
    @property
    def metrics_port(self) -> int | None: ...
    @property
    def metrics_address(self) -> str: ...
    @property
    def workers(self) -> int: ...
    @property
    def port_file(self) -> Path | None: ...
    @property
    def shutdown_grace_seconds(self) -> float: ...
    @property
    def log_level(self) -> str: ...
    @property
    def grpc_log_level(self) -> str: ...
    @property
    def failpoints(self) -> str: ...


C = TypeVar("C", bound=ServerConfig)


class ServiceMetrics(Protocol):
    """A service's metrics: one registry with the gRPC server families and the service's own."""

    @property
    def grpc(self) -> GrpcServerMetrics: ...

    def answers(self) -> Observers:
        """Return the observers that count the service's answers."""
        ...

    def serve(self, port: int, address: str) -> MetricsServer:
        """Serve the registry over HTTP; raise StartupError when address:port cannot be bound."""
        ...


class Job(Protocol):
    """Work a server does beside its calls (e.g. pruning keys), from serving until stopping."""

    def start(self) -> None:
        """Start on the running event loop."""
        ...

    async def stop(self) -> None:
        """Stop; the server is still serving."""
        ...


@dataclass(frozen=True, slots=True)
class Wiring:
    """What a service's build step returns: what the server serves and what runs beside it."""

    register: Callable[[grpc.aio.Server], Sequence[str]]
    """Adds the servicers to the server and returns their full service names (decisionflow_server.runtime.serving)."""
    interceptors: Sequence[Interceptor] = ()
    """Run around the servicers and their answer counters, after authentication and parsing (a refused
    caller never reaches them; decisionflow_server.runtime.served_calls)."""
    jobs: Sequence[Job] = ()
    """Started once the server serves, stopped before it stops."""
    reload: Sequence[Callable[[], object]] = ()
    """What SIGHUP re-reads of the service's own (e.g. a rules file), after the credentials file."""


def _nothing() -> None:
    pass


@dataclass(frozen=True, slots=True)
class Service(Generic[C]):
    """One service as the host runs it: its names, its schema, its gRPC edge and how it is built."""

    name: str
    """The ``service`` field of its log lines and of the listening line, e.g. ``orchestrator``."""
    program: str
    """Its command, e.g. ``decisionflow-orchestrator``: the first word of a start-up error."""
    logger: logging.Logger
    schema: migrating.Schema
    """Its migrations and database settings."""
    address: Setting[str]
    """``--address``, named by a start-up error about the port."""
    status_table: StatusTable
    receive: ReceiveLimits
    create: Callable[[C], Awaitable[Host]]
    """Starts the server of a configuration (the service's ``create_server``)."""
    configure_logging: Callable[[str], None] = logs.configure
    without_tracing: Callable[[], None] = _nothing
    """Called in each serving process when tracing is off."""


class Host:
    """A started server and everything opened for it, released in reverse order by stop."""

    def __init__(self, service: Service[Any], config: ServerConfig) -> None:
        self.service = service
        self.config = config
        self.port = 0
        self.metrics_port: int | None = None
        self.reload: tuple[Callable[[], object], ...] = ()
        """What SIGHUP re-reads (the credentials file, when authentication is on, then the service's own)."""
        self._running: RunningServer | None = None
        self._opened = AsyncExitStack()
        self._grace = 0.0

    @classmethod
    async def start(
        cls,
        service: Service[Any],
        config: ServerConfig,
        metrics: ServiceMetrics,
        build: Callable[[Self, Engine], Awaitable[Wiring]],
        *,
        check: Callable[[], None] = _nothing,
    ) -> Self:
        """Open and start everything config asks for (the steps in the module docstring). A setting that
        stops it, or a database or port that is not ready, raises StartupError naming the setting;
        listening beyond loopback without TLS and authentication raises ExposureRefused. Nothing stays
        open after a failure."""
        host = cls(service, config)
        try:
            await host._open(metrics, build, check)
        except BaseException:
            await host._opened.aclose()
            raise
        return host

    async def _open(
        self, metrics: ServiceMetrics, build: Callable[[Self, Engine], Awaitable[Wiring]], check: Callable[[], None]
    ) -> None:
        service, config = self.service, self.config
        schema = service.schema
        auth, tls = startup.security_parts(config.address, config.security)
        await auth.warm_up()
        check()
        reuse_port = config.workers > 1
        startup.check_bindable(config.address, service.address, reuse_port=reuse_port)
        engine = self.engine(config.database_url, schema.database_url)
        if config.metrics_port is not None:
            endpoint = metrics.serve(config.metrics_port, config.metrics_address)
            self.close_on_stop(lambda: asyncio.to_thread(endpoint.close))
            self.metrics_port = endpoint.port
        with migrating.opening_database(schema.database_url):
            found = await asyncio.to_thread(migrating.prepare, engine, schema, auto=config.migrate_at_start)
        if found.newer:
            # A rolling upgrade: the next release's migration ran first, and its record admits this one.
            service.logger.info(
                "found %s: running without migrating", found.describe_newer(), extra={"service": service.name}
            )
        wiring = await build(self, engine)
        running = await start_server(
            config.address,
            wiring.register,
            status_table=service.status_table,
            auth=auth,
            interceptors=wiring.interceptors,
            credentials=tls,
            transport=config.transport,
            receive=service.receive,
            metrics=metrics.grpc,
            # The answer counters see the servicer's answer: they count what was written even if its
            # reply is then lost (fault injection runs around the servicer, inside them).
            observers=metrics.answers(),
            reuse_port=reuse_port,
        )
        self._running, self.port = running, running.port
        self.close_on_stop(lambda: running.stop(self._grace))
        for job in wiring.jobs:
            job.start()
            self.close_on_stop(job.stop)
        reloader = server_security.credentials_reloader(config.security, auth)
        self.reload = (() if reloader is None else (reloader,)) + tuple(wiring.reload)

    def engine(self, url: str, setting: Setting[str]) -> Engine:
        """Return an engine for url, disposed at stop; a URL that cannot be used raises StartupError naming setting."""
        engine = migrating.database_engine(url, setting)
        self._opened.callback(engine.dispose)
        return engine

    def close_on_stop(self, close: Callable[[], Awaitable[object]]) -> None:
        """Call close at stop, before whatever was opened earlier is closed."""
        self._opened.push_async_callback(close)

    async def wait_for_termination(self) -> None:
        """Return when the gRPC server has stopped."""
        assert self._running is not None, "a host is returned only once its server serves"
        await self._running.server.wait_for_termination()

    async def stop(self, grace: float) -> None:
        """Stop the jobs, report NOT_SERVING, drain calls in flight within grace, then close the rest in
        reverse order of opening (a second call does nothing)."""
        self._grace = grace
        await self._opened.aclose()
