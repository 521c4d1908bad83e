"""Wiring of the decisionflow-relay command: configuration, the orchestrator's channel, NATS, metrics,
signals and exit status. The only reader of the environment.

Exit status: 0 after SIGTERM or SIGINT (the cursor stored), 1 when the relay cannot go on (the cursor
file cannot be written, or any other failure while running), 2 for a bad setting, an unusable CA or
cursor file, or a watch the orchestrator refuses for good (credentials, role).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence

import grpc

from decisionflow.bearer import bearer_metadata
from decisionflow.channels import check_cleartext_token, open_aio_channel
from decisionflow.client.events import AsyncEventsClient, EventView, Heartbeat
from decisionflow_relay import config as configuration
from decisionflow_relay.config import PROGRAM, RelayConfig
from decisionflow_relay.cursor import CursorFile
from decisionflow_relay.domain import stream_subjects
from decisionflow_relay.errors import CursorFileError, WatchRefused
from decisionflow_relay.jetstream import BrokerSettings, JetStreamPublisher, StreamSettings
from decisionflow_relay.metrics import RelayMetrics
from decisionflow_relay.service import Relay, RelaySettings, Watch
from decisionflow_server.foundation import logs, startup_errors
from decisionflow_server.foundation.startup_errors import StartupError
from decisionflow_server.runtime import grpc_core_logs, startup

logger = logging.getLogger("decisionflow.relay")
SERVICE = "relay"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2

# What decides whether the channel may carry the token: the target, TLS, or the explicit opt-in.
CHANNEL_SETTINGS = (configuration.ORCHESTRATOR_TARGET, configuration.CA_FILE, configuration.INSECURE_CLEARTEXT_TOKEN)


def open_orchestrator(config: RelayConfig) -> grpc.aio.Channel:
    """The asyncio channel to the orchestrator (TLS with a CA file); an unusable CA file, or a token that
    would travel in cleartext beyond loopback, raises StartupError."""
    startup.check_ca_file(config.ca_file, configuration.CA_FILE)
    with startup.refusing_cleartext(CHANNEL_SETTINGS):
        check_cleartext_token(
            config.orchestrator_target,
            ca_file=config.ca_file,
            token=config.token,
            allow_cleartext_token=config.allow_cleartext_token,
        )
    # The token travels as the stream's call metadata: the channel's bearer interceptor covers unary calls only.
    return open_aio_channel(
        config.orchestrator_target, ca_file=config.ca_file, allow_cleartext_token=config.allow_cleartext_token
    )


def feed(channel: grpc.aio.Channel, token: str | None) -> Watch:
    """The event feed from an index on, every event and every heartbeat. It does not reconnect by itself:
    the relay watches again from its own position, and logs the outage once."""
    client = AsyncEventsClient(channel, metadata=bearer_metadata(token) if token is not None else ())

    def watch(start_index: int) -> AsyncIterator[EventView | Heartbeat]:
        return client.watch(start_index=start_index, heartbeats=True, reconnect=False)

    return watch


def _cursor_file(config: RelayConfig) -> CursorFile:
    cursor = CursorFile(config.cursor_file)
    try:
        cursor.open()
    except CursorFileError as error:
        raise startup_errors.configuration_error(
            "cannot use the cursor file", (configuration.CURSOR_FILE,), str(error)
        ) from error
    return cursor


async def relay(config: RelayConfig, stop: asyncio.Event) -> None:
    """Run the relay until stop is set; raise WatchRefused, CursorFileError or StartupError."""
    cursor = _cursor_file(config)
    metrics = RelayMetrics()
    server = None
    if config.metrics_port is not None:
        server = metrics.serve(config.metrics_port, config.metrics_address)
        logger.info("metrics on http://%s:%d/metrics", config.metrics_address, server.port)
    channel = open_orchestrator(config)
    publisher = JetStreamPublisher(
        BrokerSettings(
            servers=config.nats_servers,
            ca_file=config.nats_ca_file,
            credentials_file=config.nats_credentials_file,
            publish_timeout=config.publish_timeout_seconds,
        ),
        StreamSettings(config.stream, stream_subjects(config.subject_prefix), config.stream_replicas),
    )
    try:
        # The stored cursor is reported before NATS answers: a relay waiting for the broker shows where it stands.
        metrics.cursor.set(await asyncio.to_thread(cursor.read))
        if not await publisher.connect(stop.is_set):
            return
        metrics.broker_up.set(1)
        settings = RelaySettings(
            prefix=config.subject_prefix,
            origin=config.origin,
            max_in_flight=config.max_in_flight,
            progress_seconds=config.progress_seconds,
            shutdown_grace_seconds=config.shutdown_grace_seconds,
        )
        await Relay(feed(channel, config.token), publisher, cursor, settings, metrics).run(stop)
    finally:
        await publisher.close()
        await channel.close(None)
        if server is not None:
            server.close()
        cursor.unlock()


async def _main(config: RelayConfig) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await relay(config, stop)
    except WatchRefused as error:
        logger.error("%s", error, extra={"service": SERVICE, "code": error.code, "reason": error.reason or None})
        return EXIT_REFUSED
    except CursorFileError as error:
        logger.error("%s; the cursor kept is the last one written", error, extra={"service": SERVICE})
        return EXIT_FAILED
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the decisionflow-relay command; returns the process exit status."""
    config = configuration.load(sys.argv[1:] if argv is None else argv, os.environ)
    logs.configure(config.log_level)
    debug = config.log_level == "debug"
    try:
        with grpc_core_logs.routed(config.grpc_log_level):
            return asyncio.run(_main(config))
    except StartupError as error:
        return startup_errors.report(PROGRAM, error, logger, debug=debug, service=SERVICE)
    except Exception as exc:
        failure = startup_errors.runtime_error("failed", (), f"{type(exc).__name__}: {startup_errors.describe(exc)}")
        failure.__cause__ = exc
        return startup_errors.report(PROGRAM, failure, logger, debug=debug, service=SERVICE)


if __name__ == "__main__":
    sys.exit(main())
