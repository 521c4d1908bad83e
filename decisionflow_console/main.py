"""Wiring of the decisionflow-console command: configuration, the listening socket, the metrics
endpoint and uvicorn. The only reader of the environment.

Prints one JSON ``listening`` line on stdout once the socket is bound (with the port, and the
origin browsers use), writes the port to ``--port-file`` if given, and serves until SIGTERM or
SIGINT. A setting that is wrong exits 2 with one line naming it; a port in use exits 1.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import uvicorn
from prometheus_client import CollectorRegistry

from decisionflow.addresses import split_host_port
from decisionflow_console import config as configuration
from decisionflow_console.app import create_app
from decisionflow_console.config import PROGRAM, ConsoleConfig
from decisionflow_console.connections import uvicorn_limits
from decisionflow_console.sessions import SessionStore
from decisionflow_console.web import signed_in_request
from decisionflow_server.foundation import logs, startup_errors
from decisionflow_server.foundation.processes import write_port_file
from decisionflow_server.foundation.startup_errors import StartupError
from decisionflow_server.runtime import grpc_core_logs, startup
from decisionflow_server.runtime.metrics import register_process_metrics, serve_metrics

logger = logging.getLogger("decisionflow.console")
SERVICE = "console"
# What decides whether people's tokens may travel to the orchestrator: its address, TLS, the opt-in.
CHANNEL_SETTINGS = (
    configuration.ORCHESTRATOR_TARGET,
    configuration.CA_FILE,
    configuration.INSECURE_CLEARTEXT_TOKEN,
)


def bind(address: str) -> socket.socket:
    """Return a listening socket on address; raise StartupError naming --address when it cannot be bound."""
    host, port = split_host_port(address)
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        listener = socket.create_server((host, port), family=family, backlog=128)
    except socket.gaierror as exc:
        raise startup_errors.configuration_error(
            f"cannot listen on {address}", (configuration.ADDRESS,), f"unknown host: {exc.strerror}"
        ) from exc
    except OSError as exc:
        raise startup.make_bind_error(address, configuration.ADDRESS, exc) from exc
    listener.set_inheritable(True)
    return listener


def serve(config: ConsoleConfig) -> None:
    """Serve the console until SIGTERM or SIGINT."""
    startup.check_ca_file(config.ca_file, configuration.CA_FILE)
    registry = CollectorRegistry()
    register_process_metrics(registry)
    listener = bind(config.address)
    port = listener.getsockname()[1]
    origin = config.origin(port)
    sessions = SessionStore(config.session_key, config.session_lifetime_seconds)
    with startup.refusing_cleartext(CHANNEL_SETTINGS):
        app = create_app(config, origin, registry=registry, sessions=sessions)
    metrics = None
    if config.metrics_port is not None:
        metrics = serve_metrics(registry, config.metrics_port, config.metrics_address, configuration.METRICS)
    try:
        if config.port_file is not None:
            write_port_file(Path(config.port_file), port)
        line = logs.json_line(
            logger.name,
            logging.INFO,
            f"listening on port {port}",
            service=SERVICE,
            event="listening",
            port=port,
            detail=origin,
        )
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_config=None,  # our JSON logs, configured once in main
                access_log=False,  # the app writes its own access line, without query strings
                lifespan="on",
                server_header=False,
                proxy_headers=False,
                **uvicorn_limits(config.connections, signed_in_request(sessions)),
            )
        )
        # uvicorn stops on SIGTERM/SIGINT, then raises the signal again for the handler it found:
        # this one, so a requested stop ends with status 0 as every other service's does.
        for stop_signal in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop_signal, _stopped)
        server.run(sockets=[listener])
    finally:
        listener.close()
        if metrics is not None:
            metrics.close()


def _stopped(signum: int, _frame: FrameType | None) -> None:
    logger.info("stopped by signal %d", signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the decisionflow-console command; returns the process exit status."""
    config = configuration.load(sys.argv[1:] if argv is None else argv, os.environ)
    logs.configure(config.log_level)
    try:
        with grpc_core_logs.routed(config.grpc_log_level):
            serve(config)
    except StartupError as error:
        return startup_errors.report(PROGRAM, error, logger, debug=config.log_level == "debug", service=SERVICE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
