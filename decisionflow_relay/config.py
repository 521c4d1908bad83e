"""The relay's configuration: one declaration per setting (flag, environment variable, default, parser,
help), and RelayConfig, whose fields name them in the order the help and the README list them. Each value
comes from its flag, else its environment variable, else its default. The orchestrator's address and TLS
are the settings every client of the orchestrator reads (``DECISIONFLOW_ORCHESTRATOR_TARGET``,
``DECISIONFLOW_ORCHESTRATOR_CA_FILE``, ``DECISIONFLOW_ORCHESTRATOR_INSECURE_CLEARTEXT_TOKEN``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from decisionflow_relay.domain import DEFAULT_ORIGIN, DEFAULT_PREFIX, check_prefix
from decisionflow_server.foundation import arguments, settings
from decisionflow_server.foundation.settings import Setting
from decisionflow_server.foundation.version import add_version_flag

PROGRAM = "decisionflow-relay"
DEFAULT_STREAM = "DECISIONFLOW_EVENTS"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
MAX_REPLICAS = 5  # JetStream's own bound on a stream's replicas


def nats_servers(value: str) -> tuple[str, ...]:
    """Comma-separated NATS URLs (nats://host:port, tls://host:port); ValueError for none or a bare address."""
    servers = tuple(part.strip() for part in value.split(",") if part.strip())
    if not servers:
        raise ValueError("give at least one NATS URL, e.g. nats://127.0.0.1:4222")
    for server in servers:
        if "://" not in server:
            raise ValueError(f"{server!r} is not a NATS URL (nats://host:port or tls://host:port)")
    return servers


def stream_name(value: str) -> str:
    """A JetStream stream name: letters, digits, '-' and '_' (no '.', '*', '>', '/', '\\' or whitespace)."""
    if not value or not all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in value):
        raise ValueError(f"{value!r} is not a stream name (ASCII letters, digits, '-' and '_')")
    return value


ORCHESTRATOR_TARGET = settings.orchestrator_target_setting(note=" (EventService)")
TOKEN_FILE = Setting(
    "token_file",
    "DECISIONFLOW_RELAY_TOKEN_FILE",
    "file holding the bearer token presented to the orchestrator (role auditor or operator: the relay watches "
    "every event)",
    parse=settings.token_file,
)
CA_FILE, INSECURE_CLEARTEXT_TOKEN = settings.orchestrator_tls_settings()
ORIGIN = Setting(
    "origin",
    "DECISIONFLOW_RELAY_ORIGIN",
    "the audit log's origin, as the orchestrator's --audit-origin names it: each event's CloudEvents source, "
    "the start of its id and Nats-Msg-Id, and a token of its subject",
    DEFAULT_ORIGIN,
    parse=settings.non_empty,
)
CURSOR_FILE = Setting(
    "cursor_file",
    "DECISIONFLOW_RELAY_CURSOR_FILE",
    "required: file holding the index of the first event JetStream has not acknowledged (absent: created, "
    "relaying from the log's first event); one relay per file, in a directory that survives restarts",
    parse=settings.path,
)
NATS_URL = Setting(
    "nats_url",
    "DECISIONFLOW_RELAY_NATS_URL",
    "NATS server URLs, comma-separated (nats://host:port, tls://host:port); the client reconnects among them",
    DEFAULT_NATS_URL,
    parse=nats_servers,
)
NATS_CA_FILE = Setting(
    "nats_ca_file",
    "DECISIONFLOW_RELAY_NATS_CA_FILE",
    "CA bundle (PEM) of the NATS servers' certificates: connect over TLS (unset: as the URLs say)",
    parse=settings.readable_file,
)
NATS_CREDENTIALS_FILE = Setting(
    "nats_credentials_file",
    "DECISIONFLOW_RELAY_NATS_CREDENTIALS_FILE",
    "NATS user credentials file (.creds: JWT and NKey seed) to connect with (unset: none)",
    parse=settings.readable_file,
)
STREAM = Setting(
    "stream",
    "DECISIONFLOW_RELAY_STREAM",
    "the JetStream stream published into; created when missing (file storage, subjects <prefix>.>, a duplicate "
    "window of 2 minutes)",
    DEFAULT_STREAM,
    parse=stream_name,
)
STREAM_REPLICAS = Setting(
    "stream_replicas",
    "DECISIONFLOW_RELAY_STREAM_REPLICAS",
    f"replicas of the stream when the relay creates it (1 to {MAX_REPLICAS}; 3 on a cluster of three)",
    "1",
    parse=settings.integer(1, MAX_REPLICAS),
)
SUBJECT_PREFIX = Setting(
    "subject_prefix",
    "DECISIONFLOW_RELAY_SUBJECT_PREFIX",
    "first token(s) of every subject: <prefix>.<origin>.<kind>.<action>",
    DEFAULT_PREFIX,
    parse=check_prefix,
)
MAX_IN_FLIGHT = Setting(
    "max_in_flight",
    "DECISIONFLOW_RELAY_MAX_IN_FLIGHT",
    "publishes sent and not yet acknowledged, at most (an event waits for its case's previous one)",
    "256",
    parse=settings.integer(1, 65_536),
)
PUBLISH_TIMEOUT_SECONDS = Setting(
    "publish_timeout_seconds",
    "DECISIONFLOW_RELAY_PUBLISH_TIMEOUT_SECONDS",
    "how long one publish waits for JetStream's acknowledgement before it is tried again",
    "5",
    parse=settings.positive_seconds,
)
PROGRESS_SECONDS = Setting(
    "progress_seconds",
    "DECISIONFLOW_RELAY_PROGRESS_SECONDS",
    "how often a progress line (published, duplicates, cursor, lag) is logged",
    "60",
    parse=settings.positive_seconds,
)
METRICS = settings.metrics_settings("RELAY")
SHUTDOWN_GRACE = settings.shutdown_grace_setting("RELAY")
LOGS = settings.log_settings("RELAY", "info")


@dataclass(frozen=True, slots=True, kw_only=True)
class RelayConfig:
    """Everything one relay process needs: one field per setting."""

    orchestrator_target: str = settings.value(ORCHESTRATOR_TARGET)
    token: str | None = settings.value_or_none(TOKEN_FILE)
    ca_file: Path | None = settings.value_or_none(CA_FILE)
    allow_cleartext_token: bool = settings.value(INSECURE_CLEARTEXT_TOKEN)
    origin: str = settings.value(ORIGIN)
    cursor_file: Path = settings.required(CURSOR_FILE)
    nats_servers: tuple[str, ...] = settings.value(NATS_URL)
    nats_ca_file: Path | None = settings.value_or_none(NATS_CA_FILE)
    nats_credentials_file: Path | None = settings.value_or_none(NATS_CREDENTIALS_FILE)
    stream: str = settings.value(STREAM)
    stream_replicas: int = settings.value(STREAM_REPLICAS)
    subject_prefix: str = settings.value(SUBJECT_PREFIX)
    max_in_flight: int = settings.value(MAX_IN_FLIGHT)
    publish_timeout_seconds: float = settings.value(PUBLISH_TIMEOUT_SECONDS)
    progress_seconds: float = settings.value(PROGRESS_SECONDS)
    metrics_port: int | None = settings.value_or_none(METRICS.port)
    metrics_address: str = settings.value(METRICS.address)
    shutdown_grace_seconds: float = settings.value(SHUTDOWN_GRACE)
    log_level: str = settings.value(LOGS.level)
    grpc_log_level: str = settings.value(LOGS.grpc_level)


SETTINGS = settings.declared(RelayConfig)


def parser() -> argparse.ArgumentParser:
    """Return the command-line parser of decisionflow-relay."""
    cli = arguments.ArgumentParser(
        prog=PROGRAM,
        description="Relay the orchestrator's event feed (EventService.WatchEvents) into a NATS JetStream stream, "
        "every event at least once with a Nats-Msg-Id JetStream deduplicates by, as CloudEvents JSON "
        "(docs/events.md). Runs until SIGTERM or SIGINT; exit status 0 after a clean stop, 1 when it cannot go on "
        "(the cursor file cannot be written), 2 for a bad setting or a watch the orchestrator refuses.",
    )
    settings.add_settings(cli, SETTINGS)
    add_version_flag(cli)
    return cli


def load(argv: Sequence[str], environ: Mapping[str, str]) -> RelayConfig:
    """Return the configuration from argv and environ (a bad value exits with status 2)."""
    cli = parser()
    return settings.load(RelayConfig, cli, cli.parse_args(list(argv)), environ)
