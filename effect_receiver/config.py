"""The receiver's configuration: one declaration per setting (flag, environment variable, default, parser,
help), and ReceiverConfig, whose fields name them in the order the help and the README list them.
Each value comes from its flag, else its environment variable, else its default."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from decisionflow_server.foundation import arguments, settings
from decisionflow_server.foundation.settings import Setting, add_settings
from decisionflow_server.foundation.version import add_version_flag
from decisionflow_server.runtime import server_security
from decisionflow_server.runtime.failpoints import failpoints_setting
from decisionflow_server.runtime.faults import FaultPlan
from decisionflow_server.runtime.server_security import ServerSecurity
from decisionflow_server.runtime.serving import TransportLimits
from effect_receiver.failpoints import FAILPOINT_NAMES


def _retention(value: str) -> timedelta:
    return timedelta(seconds=settings.positive_seconds(value))


DATABASE_URL = Setting(
    "database_url",
    "DECISIONFLOW_RECEIVER_DATABASE_URL",
    "primary database: a SQLite path or URL, or a postgresql:// URL",
    "receiver.db",
    parse=settings.non_empty,
)
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
FAILPOINTS_SETTING = failpoints_setting("RECEIVER", FAILPOINT_NAMES, "receiver.commit_then_lose_reply=raise@1")
FAULTS = Setting(
    "faults",
    "DECISIONFLOW_RECEIVER_FAULTS",
    "seeded fault injection for fault campaigns: after a call commits, lose its reply or hold it past the "
    "caller's deadline, e.g. lose_reply=0.1,delay=0.1,seed=7 (unset: off)",
    "",
    parse=FaultPlan.parse,
)


# What every server declares alike: its address, the database URL file, migration, transport limits,
# metrics, workers, shutdown grace, log levels and the port file.
SERVER = settings.server_settings("RECEIVER", "decisionflow-receiver", settings.RECEIVER_ADDRESS)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiverConfig:
    """Everything the receiver process needs to start: one field per setting."""

    address: str = settings.value(SERVER.address)
    database_url: str = settings.value(DATABASE_URL, or_file=SERVER.database_url_file)
    migrate_at_start: bool = settings.value(SERVER.migrate)
    replica_database_url: str | None = settings.value_or_none(REPLICA_DATABASE_URL)
    key_retention: timedelta | None = settings.value_or_none(KEY_RETENTION_SECONDS)
    prune_interval_seconds: float = settings.value(PRUNE_INTERVAL_SECONDS)
    failpoints: str = settings.value(FAILPOINTS_SETTING)
    faults: FaultPlan = settings.value(FAULTS)
    shutdown_grace_seconds: float = settings.value(SERVER.shutdown_grace)
    security: ServerSecurity = server_security.from_settings()
    transport: TransportLimits = TransportLimits.from_settings(SERVER.transport)
    metrics_port: int | None = settings.value_or_none(SERVER.metrics.port)
    metrics_address: str = settings.value(SERVER.metrics.address)
    workers: int = settings.value(SERVER.workers)
    log_level: str = settings.value(SERVER.logs.level)
    grpc_log_level: str = settings.value(SERVER.logs.grpc_level)
    port_file: Path | None = settings.value_or_none(SERVER.port_file)


SETTINGS = settings.declared(ReceiverConfig)


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
    return settings.load(ReceiverConfig, cli, cli.parse_args(list(argv)), environ, check=SERVER.check_workers)
