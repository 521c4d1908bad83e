"""Wiring of the receiver process: configuration, database, server; the only reader of the environment.

``decisionflow-receiver serve`` (the default: flags alone also serve) runs the server; ``migrate``
upgrades the schema (decisionflow.migrating).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import grpc
from sqlalchemy.engine import Engine

from decisionflow import logs, migrating, server_security, startup, tracing, workers
from decisionflow.failpoints import Failpoints
from decisionflow.faults import FaultInterceptor
from decisionflow.metrics import MetricsServer
from decisionflow.serving import (
    ReceiveLimits,
    RunningServer,
    announce_listening,
    run_server,
    serve_until_signal,
    serve_workers,
    start_server,
)
from decisionflow.startup import StartupError
from decisionflow.v1 import effect_receiver_pb2
from effect_receiver import housekeeping
from effect_receiver.config import (
    ADDRESS,
    DATABASE_URL,
    DATABASE_URL_FILE,
    LOG_LEVEL,
    MIGRATE,
    REPLICA_DATABASE_URL,
    ReceiverConfig,
    load,
)
from effect_receiver.domain import MAX_BATCH_LOOKUP, MAX_PAYLOAD_BYTES
from effect_receiver.grpc_api import STATUS_TABLE, EffectReceiverServicer, register
from effect_receiver.housekeeping import PruneJob
from effect_receiver.metrics import ReceiverMetrics
from effect_receiver.schema import VERSION_TABLE
from effect_receiver.service import FAILPOINT_NAMES, ReceiverService
from effect_receiver.store import MIGRATIONS, EffectStore

logger = logging.getLogger("effect_receiver")
PROGRAM = "decisionflow-receiver"
SCHEMA = migrating.Schema(
    PROGRAM, "effect_receiver", MIGRATIONS, VERSION_TABLE, DATABASE_URL, DATABASE_URL_FILE, MIGRATE, LOG_LEVEL
)

_SERVICE = "/" + effect_receiver_pb2.DESCRIPTOR.services_by_name["EffectReceiverService"].full_name + "/"
# Each method receives at most its largest valid request: Apply the payload cap and 4 KiB for its
# ids and digest; BatchLookup 1,000 operation ids of 70 characters, each with its 2-byte field header.
RECEIVE_LIMITS = ReceiveLimits(
    {
        _SERVICE + "Apply": MAX_PAYLOAD_BYTES + 4 * 1024,
        _SERVICE + "BatchLookup": MAX_BATCH_LOOKUP * 72 + 4 * 1024,
    }
)


@dataclass
class ReceiverServer(RunningServer):
    """A running receiver: the gRPC server and the database engines it releases when stopped."""

    engines: tuple[Engine, ...] = field(default=())
    faults: FaultInterceptor | None = None  # set only when fault injection is configured
    metrics: MetricsServer | None = None  # set only when metrics are served
    prune: PruneJob | None = None  # set only when a key retention and a prune interval are
    reload: tuple[Callable[[], object], ...] = ()  # what SIGHUP re-reads (the credentials file)

    @property
    def metrics_port(self) -> int | None:
        """The bound metrics port, when metrics are served."""
        return None if self.metrics is None else self.metrics.port

    async def stop(self, grace: float) -> None:
        """Stop pruning, report NOT_SERVING, drain calls in flight within grace, then close the database pools."""
        try:
            if self.prune is not None:
                await self.prune.stop()
            await super().stop(grace)
        finally:
            for engine in self.engines:
                engine.dispose()
            if self.metrics is not None:
                await asyncio.to_thread(self.metrics.close)


async def create_server(config: ReceiverConfig) -> ReceiverServer:
    """Migrate the primary database and start serving on config.address (port 0 picks a free port). A
    setting that stops it, or a database or port that is not ready, raises StartupError naming the setting;
    listening beyond loopback without TLS and authentication raises ExposureRefused."""
    auth, tls = startup.security_parts(config.address, config.security)
    startup.check_bindable(config.address, ADDRESS, reuse_port=config.workers > 1)
    primary = startup.database_engine(config.database_url, DATABASE_URL)
    engines = [primary]
    metrics = ReceiverMetrics()
    endpoint = None
    try:
        if config.metrics_port is not None:
            endpoint = metrics.serve(config.metrics_port, config.metrics_address)
        with startup.opening_database(DATABASE_URL):
            await asyncio.to_thread(migrating.prepare, primary, SCHEMA, auto=config.migrate_at_start)
        replica = None
        if config.replica_database_url:
            # A replica is read-only and gets its schema from the primary, so it is not migrated.
            replica = startup.database_engine(config.replica_database_url, REPLICA_DATABASE_URL)
            engines.append(replica)
        store = EffectStore(primary)
        service = ReceiverService(
            store,
            replica=None if replica is None else EffectStore(replica),
            failpoints=Failpoints(config.failpoints, FAILPOINT_NAMES),
            key_retention=config.key_retention,
        )
        faults = FaultInterceptor(config.faults) if config.faults.enabled else None
        # Faults come after authentication: a refused caller gets its refusal, never an injected fault.
        interceptors: list[grpc.aio.ServerInterceptor[Any, Any]] = [auth] if faults is None else [auth, faults]
        interceptors.append(metrics.answers())  # innermost: counts what was written, even if its reply is lost
        running = await start_server(
            config.address,
            register(EffectReceiverServicer(service)),
            status_table=STATUS_TABLE,
            interceptors=interceptors,
            credentials=tls,
            transport=config.transport,
            receive=RECEIVE_LIMITS,
            observers=[metrics.grpc.interceptor()],
            reuse_port=config.workers > 1,
        )
    except BaseException:
        for engine in engines:
            engine.dispose()
        if endpoint is not None:
            endpoint.close()
        raise
    prune = housekeeping.prune_job(store, config.key_retention, config.prune_interval_seconds)
    if prune is not None:
        prune.start()
    reloader = server_security.credentials_reloader(config.security, auth)
    return ReceiverServer(
        running.server,
        running.port,
        running.health,
        running.service_names,
        running.guard,
        tuple(engines),
        faults,
        endpoint,
        prune,
        reload=() if reloader is None else (reloader,),
    )


async def serve(config: ReceiverConfig, ready: workers.Ready | None = None) -> None:
    """Serve until SIGTERM or SIGINT, announcing the bound port on stdout (and in the port file), or, in a
    worker process, telling ready; a failure to start raises StartupError."""
    with startup.starting(ADDRESS):
        running = await create_server(config)
    if ready is None:
        announce_listening("effect_receiver", running.port, config.port_file)
    else:
        ready(running.port)
    logger.info(
        "listening on port %d (failpoints: %s)",
        running.port,
        config.failpoints or "none",
        extra={"service": "effect_receiver"},
    )
    if config.faults.enabled:
        logger.warning("fault injection on: %s", config.faults, extra={"service": "effect_receiver"})
    await serve_until_signal(running, config.shutdown_grace_seconds, reload=running.reload)
    logger.info("stopped", extra={"service": "effect_receiver"})


def main(argv: Sequence[str] | None = None) -> int:
    """Run decisionflow-receiver (``serve``, the default, ``migrate`` or ``prune-keys``); returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "migrate":
        return migrating.migrate_command(SCHEMA, args[1:], logs.configure, logger)
    if args[:1] == [housekeeping.COMMAND]:
        return housekeeping.main(args[1:], SCHEMA)
    if args and args[0] == "serve":
        args = args[1:]
    config = load(args, os.environ)
    logs.configure(config.log_level)
    if config.workers > 1:
        return _serve_workers(config)
    return _serve_process(config)


def _serve_workers(config: ReceiverConfig) -> int:
    """Fork config.workers server processes on one port; return the exit status."""

    def serve(address: str, metrics_port: int | None, ready: workers.Ready) -> int:
        return _serve_process(replace(config, address=address, metrics_port=metrics_port, port_file=None), ready)

    try:
        with startup.claimed_address(config.address, ADDRESS) as address:
            return serve_workers(
                "effect_receiver", config.workers, address, config.port_file, config.metrics_port, serve, logger
            )
    except StartupError as error:
        return startup.report(PROGRAM, error, logger, debug=config.log_level == "debug", service="effect_receiver")


def _serve_process(config: ReceiverConfig, ready: workers.Ready | None = None) -> int:
    # Tracing starts exporter threads: in a worker process, after the fork.
    tracing.configure_or_exit(PROGRAM, PROGRAM, os.environ)
    try:
        run_server(serve(config, ready))
    except StartupError as error:
        return startup.report(PROGRAM, error, logger, debug=config.log_level == "debug", service="effect_receiver")
    except Exception:
        logger.exception("receiver failed", extra={"service": "effect_receiver"})
        return 1


if __name__ == "__main__":
    sys.exit(main())
