"""A server process from its command line to its exit status: the commands every service has, one
process or forked workers, the listening line, signals, and one line for a start-up failure.

- ``command_line`` reads a service's command: ``migrate`` (decisionflow_server.storage.migrating), the service's own
  commands (housekeeping), or ``serve`` (the default: flags alone also serve).
- ``run`` serves in this process, or with ``--workers N`` forks N workers before any gRPC object
  exists, under the claim on the address (decisionflow_server.runtime.workers,
  decisionflow_server.runtime.startup.claimed_address).
- ``serve`` starts the service's host, announces the port, serves until SIGTERM or SIGINT (SIGHUP
  reloads the credentials) and stops it; a start-up failure is one line and exit 2 or 1
  (decisionflow_server.runtime.startup).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from decisionflow_server.foundation import logs, startup_errors
from decisionflow_server.foundation.processes import write_port_file
from decisionflow_server.foundation.startup_errors import StartupError
from decisionflow_server.runtime import grpc_core_logs, startup, tracing, workers
from decisionflow_server.runtime.host._lifecycle import C, Host, Service
from decisionflow_server.storage import migrating

# The listening and shutting-down lines keep the logger name operators and docs/observability.md know.
logger = logging.getLogger("decisionflow.serving")

Command = Callable[[list[str]], int]
"""A service's own command (housekeeping): its arguments in, its exit status out."""


def command_line(
    service: Service[C],
    argv: Sequence[str],
    environ: Mapping[str, str],
    load: Callable[[list[str]], C],
    commands: Mapping[str, Command] | None = None,
) -> int:
    """Run the service's command line: ``migrate``, one of commands, or ``serve`` (the default, with the
    configuration load returns from the rest); return the exit status."""
    args = list(argv)
    if args[:1] == ["migrate"]:
        return migrating.migrate_command(service.schema, args[1:], service.configure_logging, service.logger)
    if commands and args and args[0] in commands:
        return commands[args[0]](args[1:])
    if args[:1] == ["serve"]:
        args = args[1:]
    config = load(args)
    service.configure_logging(config.log_level)
    return run(service, config, environ)


def run(service: Service[C], config: C, environ: Mapping[str, str]) -> int:
    """Serve config in this process, or in config.workers forked processes sharing its port; return the
    exit status."""
    if config.workers <= 1:
        return _serve_process(service, config, environ)

    def serve(address: str, metrics_port: int | None, ready: workers.Ready) -> int:
        worker = dataclasses.replace(config, address=address, metrics_port=metrics_port, port_file=None)
        return _serve_process(service, worker, environ, ready)

    try:
        with startup.claimed_address(config.address, service.address) as address:
            return serve_workers(
                service.name, config.workers, address, config.port_file, config.metrics_port, serve, service.logger
            )
    except StartupError as error:
        return _report(service, config, error)


def _report(service: Service[Any], config: C, error: StartupError) -> int:
    debug = config.log_level == "debug"
    return startup_errors.report(service.program, error, service.logger, debug=debug, service=service.name)


def _serve_process(
    service: Service[C], config: C, environ: Mapping[str, str], ready: workers.Ready | None = None
) -> int:
    # Tracing starts exporter threads, and the core's log relay its reader: in a worker process, after the fork.
    if not tracing.configure_or_exit(service.program, service.program, environ):
        service.without_tracing()
    relay = grpc_core_logs.CoreLogRelay(config.grpc_log_level)
    try:
        run_server(serve(service, config, ready), before_exit=relay.stop)
    except StartupError as error:
        relay.stop()
        return _report(service, config, error)
    except Exception:
        relay.stop()
        service.logger.exception("%s failed", service.program, extra={"service": service.name})
        return 1


async def serve(service: Service[C], config: C, ready: workers.Ready | None = None) -> None:
    """Serve until SIGTERM or SIGINT, announcing the bound port on stdout (and in the port file), or, in a
    worker process, telling ready; a failure to start raises StartupError."""
    with startup.starting(service.address):
        host = await service.create(config)
    # What start-up built (modules, tables, compiled statements, the workflow graph) lives as long
    # as the process: frozen, the collector no longer walks it on every full collection, which
    # under load was about 7 % of a served call's CPU.
    gc.freeze()
    if ready is None:
        announce_listening(service.name, host.port, config.port_file)
    else:
        ready(host.port)
    service.logger.info(
        "listening on port %d (failpoints: %s; event loop: %s)",
        host.port,
        config.failpoints or "none",
        type(asyncio.get_running_loop()).__module__.partition(".")[0],  # uvloop or asyncio
        extra={"service": service.name},
    )
    await serve_until_signal(host, config.shutdown_grace_seconds)
    service.logger.info("stopped", extra={"service": service.name})


async def serve_until_signal(host: Host, grace: float) -> None:
    """Serve until SIGTERM or SIGINT, then stop host gracefully; on SIGHUP call each of host.reload (e.g.
    re-read the credentials file), a failing one logged, never ending the server."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, _reload_all, host.reload)
    serving = asyncio.ensure_future(host.wait_for_termination())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    logger.info("shutting down: NOT_SERVING, draining calls for up to %.1f s", grace)
    await host.stop(grace)
    serving.cancel()
    stopping.cancel()


def _reload_all(reload: Sequence[Callable[[], object]]) -> None:
    if not reload:
        logger.info("SIGHUP: nothing to reload")
    for callback in reload:
        try:
            callback()
        except Exception:
            logger.exception("SIGHUP: reloading failed; serving on as before")


async def _cancel_remaining_tasks() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


def _new_event_loop() -> asyncio.AbstractEventLoop:
    # uvloop schedules in C. gRPC's per-call work runs in the loop's callbacks, and so do the futures of
    # every thread hand-off: on uvloop a created Apply or a replayed Approve costs 14-16% less CPU and
    # a first Approve 8% less (bench, alternating runs; StartReview unchanged).
    try:
        import uvloop
    except ImportError:  # a platform uvloop is not built for (Windows): asyncio's own loop
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_server(serve: Coroutine[Any, Any, None], before_exit: Callable[[], None] = lambda: None) -> NoReturn:
    """Run serve() to its end, call before_exit, then end the process with status 0 at once; an exception
    propagates (before_exit not called)."""
    # A call cancelled when the grace period runs out can leave its database work running in a
    # worker thread (waiting on a lock for as long as the busy timeout allows), and asyncio.run,
    # then the interpreter, would wait for that thread without bound. The work is one atomic
    # transaction, so ending the process rolls it back.
    loop = _new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(serve)
        loop.run_until_complete(_cancel_remaining_tasks())
    finally:
        asyncio.set_event_loop(None)
        loop.close()  # unlike asyncio.run, does not wait for the default executor's threads
    tracing.shutdown()  # exports the spans still queued
    before_exit()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def announce_listening(service: str, port: int, port_file: Path | None) -> None:
    """Tell a parent process the bound port: a JSON log line on stdout (``"event": "listening"``, with
    ``service`` and ``port``) and, if asked, a port file."""
    if port_file is not None:
        write_port_file(port_file, port)
    # A log line like every other, with the fields a parent reads (event, service, port), written even at
    # --log-level warning: the parent waits for it.
    line = logs.json_line(
        logger.name, logging.INFO, f"listening on port {port}", event="listening", service=service, port=port
    )
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def serve_workers(
    service: str,
    count: int,
    address: str,
    port_file: Path | None,
    metrics_port: int | None,
    serve: Callable[[str, int | None, workers.Ready], int],
    log: logging.Logger,
) -> int:
    """Fork count worker processes of service that share address (decisionflow_server.runtime.workers); return the
    exit status. The parent's own lines go to the service's log.

    Worker i runs serve(address, its metrics port, ready): metrics_port + i when a metrics port is
    set, each worker serving its own. The shared port is announced (and written to port_file)
    once every worker is serving.
    """

    def worker(index: int, bound: str, ready: workers.Ready) -> int:
        return serve(bound, metrics_port + index if metrics_port else metrics_port, ready)

    def announce(port: int) -> None:
        announce_listening(service, port, port_file)
        log.info("%d workers serving port %d", count, port, extra={"service": service})

    status = workers.run_workers(count, address, worker, announce)
    log.info("every worker stopped", extra={"service": service})
    return status
