"""The receiver's configuration: each setting from its flag, else its environment variable, else its default."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from decisionflow import server_security
from decisionflow.failpoints import Failpoints
from decisionflow.faults import FaultPlan
from decisionflow.server_security import ServerSecurity
from decisionflow.settings import Setting, add_settings, resolve
from effect_receiver.service import FAILPOINT_NAMES

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "address",
        "DECISIONFLOW_RECEIVER_ADDRESS",
        "host:port to listen on (port 0 picks a free one)",
        "127.0.0.1:50061",
    ),
    Setting(
        "database_url",
        "DECISIONFLOW_RECEIVER_DATABASE_URL",
        "primary database: a SQLite path or URL, or a postgresql:// URL",
        "receiver.db",
    ),
    Setting(
        "replica_database_url",
        "DECISIONFLOW_RECEIVER_REPLICA_DATABASE_URL",
        "read replica for Lookup and BatchLookup (their answers then say EVENTUAL)",
    ),
    Setting(
        "key_retention_seconds",
        "DECISIONFLOW_RECEIVER_KEY_RETENTION_SECONDS",
        "how long keys are kept, advertised on every response (unset: forever)",
    ),
    Setting(
        "failpoints",
        "DECISIONFLOW_RECEIVER_FAILPOINTS",
        "fault injection, e.g. receiver.commit_then_lose_reply=raise@1 (names: " + ", ".join(FAILPOINT_NAMES) + ")",
        "",
    ),
    Setting(
        "faults",
        "DECISIONFLOW_RECEIVER_FAULTS",
        "seeded fault injection for fault campaigns: after a call commits, lose its reply or hold it past the "
        "caller's deadline, e.g. lose_reply=0.1,delay=0.1,seed=7 (unset: off)",
        "",
    ),
    Setting(
        "shutdown_grace_seconds",
        "DECISIONFLOW_RECEIVER_SHUTDOWN_GRACE_SECONDS",
        "on SIGTERM/SIGINT, how long calls in flight may finish",
        "10",
    ),
    *server_security.SETTINGS,
    Setting("log_level", "DECISIONFLOW_RECEIVER_LOG_LEVEL", "debug, info, warning or error", "info"),
    Setting("port_file", "", "write the bound port to this file once serving", flag_only=True),
)

_LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True, slots=True)
class ReceiverConfig:
    """Everything the receiver process needs to start."""

    address: str = "127.0.0.1:50061"
    database_url: str = "receiver.db"
    replica_database_url: str | None = None
    key_retention: timedelta | None = None
    failpoints: str = ""
    faults: FaultPlan = field(default_factory=FaultPlan)
    shutdown_grace_seconds: float = 10.0
    log_level: str = "info"
    port_file: Path | None = None
    security: ServerSecurity = field(default_factory=ServerSecurity)


def _positive_seconds(parser: argparse.ArgumentParser, setting: str, text: str, *, zero_ok: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        parser.error(f"{setting} must be a number of seconds, not {text!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        parser.error(f"{setting} must be {'non-negative' if zero_ok else 'positive'}, not {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    """Return the command-line parser of decisionflow-receiver."""
    result = argparse.ArgumentParser(
        prog="decisionflow-receiver", description="EffectReceiver: writes one effect per operation id."
    )
    add_settings(result, SETTINGS)
    return result


def load(argv: Sequence[str], environ: Mapping[str, str]) -> ReceiverConfig:
    """Return the configuration from argv and environ; a bad value exits with a usage error (status 2)."""
    cli = parser()
    values = resolve(cli.parse_args(list(argv)), SETTINGS, environ)
    retention_text = values["key_retention_seconds"]
    retention = None
    if retention_text:
        retention = timedelta(seconds=_positive_seconds(cli, "key_retention_seconds", retention_text, zero_ok=False))
    grace = _positive_seconds(cli, "shutdown_grace_seconds", values["shutdown_grace_seconds"] or "", zero_ok=True)
    log_level = (values["log_level"] or "").lower()
    if log_level not in _LOG_LEVELS:
        cli.error(f"log_level must be one of {', '.join(_LOG_LEVELS)}, not {log_level!r}")
    failpoints = values["failpoints"] or ""
    try:
        Failpoints(failpoints, FAILPOINT_NAMES)  # refuse a typo now, not at the first Apply
    except ValueError as exc:
        cli.error(str(exc))
    try:
        faults = FaultPlan.parse(values["faults"] or "")
    except ValueError as exc:
        cli.error(str(exc))
    address, database_url = values["address"], values["database_url"]
    assert address is not None and database_url is not None  # both have defaults
    port_file = values["port_file"]
    try:
        security = server_security.from_values(values)
    except ValueError as exc:
        cli.error(str(exc))
    return ReceiverConfig(
        address=address,
        database_url=database_url,
        replica_database_url=values["replica_database_url"] or None,
        key_retention=retention,
        failpoints=failpoints,
        faults=faults,
        shutdown_grace_seconds=grace,
        log_level=log_level,
        port_file=Path(port_file) if port_file else None,
        security=security,
    )
