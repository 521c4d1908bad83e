"""The reconciler's configuration: each setting from its flag, else its environment variable, else its
default, parsed by the setting's own parser."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from decisionflow_server.foundation import arguments, settings
from decisionflow_server.foundation.settings import Setting, SettingError, add_settings, parse_settings
from decisionflow_server.foundation.version import add_version_flag

MAX_BATCH_SIZE = 1000  # the BatchLookup and BatchSettleOperations limit

ORCHESTRATOR_TARGET = Setting(
    "orchestrator_target",
    "DECISIONFLOW_ORCHESTRATOR_TARGET",
    "host:port of the orchestrator (OperationsService)",
    "127.0.0.1:50051",
    parse=settings.target,
)
RECEIVER_TARGET = Setting(
    "receiver_target",
    "DECISIONFLOW_RECEIVER_TARGET",
    "host:port of the EffectReceiver",
    "127.0.0.1:50061",
    parse=settings.target,
)
ORCHESTRATOR_TOKEN_FILE = Setting(
    "orchestrator_token_file",
    "DECISIONFLOW_RECONCILER_ORCHESTRATOR_TOKEN_FILE",
    "file holding the bearer token presented to the orchestrator only (role operator)",
    parse=settings.token_file,
)
RECEIVER_TOKEN_FILE = Setting(
    "receiver_token_file",
    "DECISIONFLOW_RECONCILER_RECEIVER_TOKEN_FILE",
    "file holding the bearer token presented to the receiver only (role effect_reader)",
    parse=settings.token_file,
)
# Retired: one token sent to both services let a compromised receiver call the orchestrator as an
# operator. Still recognised, so that a deployment giving it fails at start with a pointer, not with
# UNAUTHENTICATED on its first call.
RETIRED_TOKEN_FILE: Setting[str] = Setting("token_file", "DECISIONFLOW_RECONCILER_TOKEN_FILE", "retired")
CA_FILE = Setting(
    "ca_file",
    "DECISIONFLOW_RECONCILER_CA_FILE",
    "CA bundle (PEM): talk TLS to both services, trusting this CA (unset: plaintext, loopback use)",
    parse=settings.readable_file,
)
INSECURE_CLEARTEXT_TOKEN = settings.cleartext_token_setting(
    "insecure_cleartext_token", "DECISIONFLOW_RECONCILER_INSECURE_CLEARTEXT_TOKEN", "both services"
)
GRACE_SECONDS = Setting(
    "grace_seconds",
    "DECISIONFLOW_RECONCILER_GRACE_SECONDS",
    "APPROVED operations older than this are re-driven (younger ones may still be in their own commit step)",
    "30",
    parse=settings.seconds,
)
ALERT_AFTER_SECONDS = Setting(
    "alert_after_seconds",
    "DECISIONFLOW_RECONCILER_ALERT_AFTER_SECONDS",
    "exit 1 when an operation decided longer ago than this is still not confirmed after the pass",
    "300",
    parse=settings.seconds,
)
BATCH_SIZE = Setting(
    "batch_size",
    "DECISIONFLOW_RECONCILER_BATCH_SIZE",
    f"operations per ListOperations page, BatchLookup and BatchSettleOperations call (1 to {MAX_BATCH_SIZE})",
    "500",
    parse=settings.integer(1, MAX_BATCH_SIZE),
)
TIMEOUT_SECONDS = Setting(
    "timeout_seconds",
    "DECISIONFLOW_RECONCILER_TIMEOUT_SECONDS",
    "deadline of each call attempt (transient failures are retried within the client policy)",
    "10",
    parse=settings.positive_seconds,
)
METRICS = settings.metrics_settings("RECONCILER", port_note=", and /healthz (with --interval only)")
METRICS_PORT = METRICS.port
METRICS_ADDRESS = METRICS.address
UNHEALTHY_AFTER_FAILED_PASSES = Setting(
    "unhealthy_after_failed_passes",
    "DECISIONFLOW_RECONCILER_UNHEALTHY_AFTER_FAILED_PASSES",
    "after this many passes in a row could not run, /healthz on the metrics port answers 503 NOT_SERVING",
    "3",
    parse=settings.integer(1, 1_000_000),
)
LOG_LEVEL = settings.log_level_setting("RECONCILER", "warning")
GRPC_LOG_LEVEL = settings.grpc_log_level_setting("RECONCILER")
INTERVAL = Setting(
    "interval", "", "run a pass every SECONDS until SIGTERM or SIGINT", flag_only=True, parse=settings.positive_seconds
)

SETTINGS: tuple[Setting[Any], ...] = (
    ORCHESTRATOR_TARGET,
    RECEIVER_TARGET,
    ORCHESTRATOR_TOKEN_FILE,
    RECEIVER_TOKEN_FILE,
    CA_FILE,
    INSECURE_CLEARTEXT_TOKEN,
    GRACE_SECONDS,
    ALERT_AFTER_SECONDS,
    BATCH_SIZE,
    TIMEOUT_SECONDS,
    METRICS_PORT,
    METRICS_ADDRESS,
    UNHEALTHY_AFTER_FAILED_PASSES,
    LOG_LEVEL,
    GRPC_LOG_LEVEL,
    INTERVAL,
)

# Switches: present or absent, never read from the environment.
ONCE = Setting("once", "", "run one pass and exit with its status", switch=True, parse=settings.boolean)
NO_REDRIVE = Setting(
    "no_redrive", "", "never re-drive: only settle and note lookups", switch=True, parse=settings.boolean
)
JSON = Setting("json", "", "print each pass's summary as one JSON object", switch=True, parse=settings.boolean)
SWITCHES: tuple[Setting[Any], ...] = (ONCE, NO_REDRIVE, JSON)


@dataclass(frozen=True, slots=True)
class ReconcilerConfig:
    """Everything one reconciler process needs."""

    once: bool = True
    interval_seconds: float | None = None
    orchestrator_target: str = "127.0.0.1:50051"
    receiver_target: str = "127.0.0.1:50061"
    orchestrator_token: str | None = None
    receiver_token: str | None = None
    ca_file: Path | None = None
    allow_cleartext_token: bool = False
    grace_seconds: float = 30.0
    alert_after_seconds: float = 300.0
    batch_size: int = 500
    timeout_seconds: float = 10.0
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    unhealthy_after_failed_passes: int = 3
    no_redrive: bool = False
    json: bool = False
    log_level: str = "warning"
    grpc_log_level: str = "error"

    @property
    def grace(self) -> timedelta:
        """The grace period as a timedelta."""
        return timedelta(seconds=self.grace_seconds)

    @property
    def alert_after(self) -> timedelta:
        """The alert threshold as a timedelta."""
        return timedelta(seconds=self.alert_after_seconds)

    @property
    def timeout(self) -> timedelta:
        """The per-call deadline as a timedelta."""
        return timedelta(seconds=self.timeout_seconds)


def parser() -> argparse.ArgumentParser:
    """Return the command-line parser of decisionflow-reconciler."""
    cli = arguments.ArgumentParser(
        prog="decisionflow-reconciler",
        description="Settle operations whose outcome is Unknown by asking the EffectReceiver. Exit status: "
        "0 nothing older than --alert-after-seconds is left unconfirmed, 1 something is, 2 could not run.",
    )
    add_settings(cli, (*SETTINGS, *SWITCHES))
    cli.add_argument(RETIRED_TOKEN_FILE.flag, dest=RETIRED_TOKEN_FILE.key, default=None, help=argparse.SUPPRESS)
    add_version_flag(cli)
    return cli


def _refuse_retired_token_file(ns: argparse.Namespace, environ: Mapping[str, str]) -> None:
    if getattr(ns, RETIRED_TOKEN_FILE.key, None) is not None or environ.get(RETIRED_TOKEN_FILE.env):
        raise SettingError(
            f"{RETIRED_TOKEN_FILE.names} is retired: give {ORCHESTRATOR_TOKEN_FILE.flag} (role operator) and "
            f"{RECEIVER_TOKEN_FILE.flag} (role effect_reader), one token per service"
        )


def from_namespace(
    cli: argparse.ArgumentParser, ns: argparse.Namespace, environ: Mapping[str, str]
) -> ReconcilerConfig:
    """Return the configuration from parsed flags and environ; a bad value exits with status 2."""
    try:
        _refuse_retired_token_file(ns, environ)
        values = parse_settings(ns, (*SETTINGS, *SWITCHES), environ)
        once, interval = values.required(ONCE), values[INTERVAL]
        if once == (interval is not None):
            raise SettingError(f"give exactly one of {ONCE.flag} and {INTERVAL.flag} SECONDS")
        return ReconcilerConfig(
            once=once,
            interval_seconds=interval,
            orchestrator_target=values.required(ORCHESTRATOR_TARGET),
            receiver_target=values.required(RECEIVER_TARGET),
            orchestrator_token=values[ORCHESTRATOR_TOKEN_FILE],
            receiver_token=values[RECEIVER_TOKEN_FILE],
            ca_file=values[CA_FILE],
            allow_cleartext_token=values.required(INSECURE_CLEARTEXT_TOKEN),
            grace_seconds=values.required(GRACE_SECONDS),
            alert_after_seconds=values.required(ALERT_AFTER_SECONDS),
            batch_size=values.required(BATCH_SIZE),
            timeout_seconds=values.required(TIMEOUT_SECONDS),
            metrics_port=values[METRICS_PORT],
            metrics_address=values.required(METRICS_ADDRESS),
            unhealthy_after_failed_passes=values.required(UNHEALTHY_AFTER_FAILED_PASSES),
            no_redrive=values.required(NO_REDRIVE),
            json=values.required(JSON),
            log_level=values.required(LOG_LEVEL),
            grpc_log_level=values.required(GRPC_LOG_LEVEL),
        )
    except SettingError as error:
        cli.error(str(error))


def load(argv: Sequence[str], environ: Mapping[str, str]) -> ReconcilerConfig:
    """Return the configuration from argv and environ (a bad value exits with status 2)."""
    cli = parser()
    return from_namespace(cli, cli.parse_args(list(argv)), environ)
