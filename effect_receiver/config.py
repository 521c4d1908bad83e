"""The receiver's configuration: each setting from its flag, else its environment variable, else its
default, parsed by the setting's own parser."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from decisionflow_server.foundation import arguments, settings
from decisionflow_server.foundation.settings import Setting, SettingError, add_settings, parse_settings
from decisionflow_server.foundation.version import add_version_flag
from decisionflow_server.runtime import server_security
from decisionflow_server.runtime.failpoints import Failpoints
from decisionflow_server.runtime.faults import FaultPlan
from decisionflow_server.runtime.server_security import ServerSecurity
from decisionflow_server.runtime.serving import TransportLimits
from effect_receiver.service import FAILPOINT_NAMES


def _failpoints(value: str) -> str:
    Failpoints(value, FAILPOINT_NAMES)  # refuse a typo now, not at the first Apply
    return value


def _retention(value: str) -> timedelta:
    return timedelta(seconds=settings.positive_seconds(value))


ADDRESS = Setting(
    "address",
    "DECISIONFLOW_RECEIVER_ADDRESS",
    "host:port to listen on (port 0 picks a free one)",
    "127.0.0.1:50061",
    parse=settings.target,
)
DATABASE_URL = Setting(
    "database_url",
    "DECISIONFLOW_RECEIVER_DATABASE_URL",
    "primary database: a SQLite path or URL, or a postgresql:// URL",
    "receiver.db",
    parse=settings.non_empty,
)
DATABASE_URL_FILE = settings.database_url_file_setting("RECEIVER")
MIGRATE = settings.migrate_setting("RECEIVER", "decisionflow-receiver")
REPLICA_DATABASE_URL = Setting(
    "replica_database_url",
    "DECISIONFLOW_RECEIVER_REPLICA_DATABASE_URL",
    "read replica for Lookup and BatchLookup (their answers then say EVENTUAL)",
    parse=settings.non_empty,
)
KEY_RETENTION_SECONDS = Setting(
    "key_retention_seconds",
    "DECISIONFLOW_RECEIVER_KEY_RETENTION_SECONDS",
    "how long keys are kept, advertised on every response (unset: forever)",
    parse=_retention,
)
PRUNE_INTERVAL_SECONDS = Setting(
    "prune_interval_seconds",
    "DECISIONFLOW_RECEIVER_PRUNE_INTERVAL_SECONDS",
    "how often the server deletes keys older than the key retention, in batches (0: never; without a "
    "retention nothing is pruned)",
    "3600",
    parse=settings.seconds,
)
FAILPOINTS_SETTING = Setting(
    "failpoints",
    "DECISIONFLOW_RECEIVER_FAILPOINTS",
    "fault injection, e.g. receiver.commit_then_lose_reply=raise@1 (names: " + ", ".join(FAILPOINT_NAMES) + ")",
    "",
    parse=_failpoints,
)
FAULTS = Setting(
    "faults",
    "DECISIONFLOW_RECEIVER_FAULTS",
    "seeded fault injection for fault campaigns: after a call commits, lose its reply or hold it past the "
    "caller's deadline, e.g. lose_reply=0.1,delay=0.1,seed=7 (unset: off)",
    "",
    parse=FaultPlan.parse,
)
TRANSPORT = settings.transport_settings("RECEIVER")
SHUTDOWN_GRACE_SECONDS = settings.shutdown_grace_setting("RECEIVER")
LOG_LEVEL = settings.log_level_setting("RECEIVER", "info")
GRPC_LOG_LEVEL = settings.grpc_log_level_setting("RECEIVER")
METRICS = settings.metrics_settings("RECEIVER", workers=True)
PORT_FILE = settings.PORT_FILE
WORKERS = settings.workers_setting("RECEIVER")

SETTINGS: tuple[Setting[Any], ...] = (
    ADDRESS,
    DATABASE_URL,
    DATABASE_URL_FILE,
    MIGRATE,
    REPLICA_DATABASE_URL,
    KEY_RETENTION_SECONDS,
    PRUNE_INTERVAL_SECONDS,
    FAILPOINTS_SETTING,
    FAULTS,
    SHUTDOWN_GRACE_SECONDS,
    *server_security.SETTINGS,
    *TRANSPORT.all,
    *METRICS.all,
    WORKERS,
    LOG_LEVEL,
    GRPC_LOG_LEVEL,
    PORT_FILE,
)
# What decisionflow-receiver prune-keys reads: the same database and retention as the server.
HOUSEKEEPING_SETTINGS: tuple[Setting[Any], ...] = (DATABASE_URL, DATABASE_URL_FILE, KEY_RETENTION_SECONDS, LOG_LEVEL)


@dataclass(frozen=True, slots=True)
class ReceiverConfig:
    """Everything the receiver process needs to start."""

    address: str = "127.0.0.1:50061"
    database_url: str = "receiver.db"
    migrate_at_start: bool = True
    replica_database_url: str | None = None
    key_retention: timedelta | None = None
    prune_interval_seconds: float = 3600.0
    failpoints: str = ""
    faults: FaultPlan = field(default_factory=FaultPlan)
    shutdown_grace_seconds: float = 10.0
    log_level: str = "info"
    grpc_log_level: str = "error"
    port_file: Path | None = None
    security: ServerSecurity = field(default_factory=ServerSecurity)
    transport: TransportLimits = field(default_factory=TransportLimits)
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    workers: int = 1


def parser() -> argparse.ArgumentParser:
    """Return the command-line parser of decisionflow-receiver."""
    result = arguments.ArgumentParser(
        prog="decisionflow-receiver",
        description="EffectReceiver: writes one effect per operation id. "
        "Schema: decisionflow-receiver migrate --help. Housekeeping: decisionflow-receiver prune-keys --help",
    )
    add_settings(result, SETTINGS)
    add_version_flag(result)
    return result


def load(argv: Sequence[str], environ: Mapping[str, str]) -> ReceiverConfig:
    """Return the configuration from argv and environ; a bad value exits with a usage error (status 2)."""
    cli = parser()
    try:
        values = parse_settings(cli.parse_args(list(argv)), SETTINGS, environ)
        settings.check_workers_address(values.required(WORKERS), values.required(ADDRESS), WORKERS, ADDRESS)
        return ReceiverConfig(
            address=values.required(ADDRESS),
            database_url=values.required_one_of(DATABASE_URL, DATABASE_URL_FILE),
            migrate_at_start=values.required(MIGRATE),
            replica_database_url=values[REPLICA_DATABASE_URL],
            key_retention=values[KEY_RETENTION_SECONDS],
            prune_interval_seconds=values.required(PRUNE_INTERVAL_SECONDS),
            failpoints=values.required(FAILPOINTS_SETTING),
            faults=values.required(FAULTS),
            shutdown_grace_seconds=values.required(SHUTDOWN_GRACE_SECONDS),
            log_level=values.required(LOG_LEVEL),
            grpc_log_level=values.required(GRPC_LOG_LEVEL),
            port_file=values[PORT_FILE],
            security=server_security.from_values(values),
            transport=TransportLimits.from_values(values, TRANSPORT),
            metrics_port=values[METRICS.port],
            metrics_address=values.required(METRICS.address),
            workers=values.required(WORKERS),
        )
    except SettingError as error:
        cli.error(str(error))
