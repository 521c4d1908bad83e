"""The reconciler's configuration: one declaration per setting (flag, environment variable, default,
parser, help), and ReconcilerConfig, whose fields name them in the order the help and the README
list them. Each value comes from its flag, else its environment variable, else its default."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from decisionflow_server.foundation import arguments, settings
from decisionflow_server.foundation.settings import Setting, SettingError, SettingValues, add_settings
from decisionflow_server.foundation.version import add_version_flag
from reconciler.domain import MAX_BATCH_SIZE, PassSettings

# The pass's knobs are declared once, with their defaults, in PassSettings.
_PASS = PassSettings()


def _seconds(duration: timedelta) -> str:
    return f"{duration.total_seconds():g}"


ORCHESTRATOR_TARGET = settings.orchestrator_target_setting(note=" (OperationsService)")
RECEIVER_TARGET = settings.receiver_target_setting()
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
CA_FILE, INSECURE_CLEARTEXT_TOKEN = settings.client_tls_settings(
    "",
    "DECISIONFLOW_RECONCILER_",
    "CA bundle (PEM): talk TLS to both services, trusting this CA (unset: plaintext, loopback use)",
    "both services",
)
GRACE_SECONDS = Setting(
    "grace_seconds",
    "DECISIONFLOW_RECONCILER_GRACE_SECONDS",
    "APPROVED operations older than this are re-driven (younger ones may still be in their own commit step)",
    _seconds(_PASS.grace),
    parse=settings.seconds,
)
ALERT_AFTER_SECONDS = Setting(
    "alert_after_seconds",
    "DECISIONFLOW_RECONCILER_ALERT_AFTER_SECONDS",
    "exit 1 when an operation decided longer ago than this is still not confirmed after the pass",
    _seconds(_PASS.alert_after),
    parse=settings.seconds,
)
BATCH_SIZE = Setting(
    "batch_size",
    "DECISIONFLOW_RECONCILER_BATCH_SIZE",
    f"operations per ListOperations page, BatchLookup and BatchSettleOperations call (1 to {MAX_BATCH_SIZE})",
    str(_PASS.batch_size),
    parse=settings.integer(1, MAX_BATCH_SIZE),
)
TIMEOUT_SECONDS = Setting(
    "timeout_seconds",
    "DECISIONFLOW_RECONCILER_TIMEOUT_SECONDS",
    "deadline of each call attempt (transient failures are retried within the client policy)",
    _seconds(_PASS.redrive_margin),
    parse=settings.positive_seconds,
)
METRICS = settings.metrics_settings("RECONCILER", port_note=", and /healthz (with --interval only)")
UNHEALTHY_AFTER_FAILED_PASSES = Setting(
    "unhealthy_after_failed_passes",
    "DECISIONFLOW_RECONCILER_UNHEALTHY_AFTER_FAILED_PASSES",
    "after this many passes in a row could not run, /healthz on the metrics port answers 503 NOT_SERVING",
    "3",
    parse=settings.integer(1, 1_000_000),
)
LOGS = settings.log_settings("RECONCILER", "warning")
INTERVAL = Setting(
    "interval", "", "run a pass every SECONDS until SIGTERM or SIGINT", flag_only=True, parse=settings.positive_seconds
)

# Switches: present or absent, never read from the environment.
ONCE = Setting("once", "", "run one pass and exit with its status", switch=True, parse=settings.boolean)
NO_REDRIVE = Setting(
    "no_redrive", "", "never re-drive: only settle and note lookups", switch=True, parse=settings.boolean
)
JSON = Setting("json", "", "print each pass's summary as one JSON object", switch=True, parse=settings.boolean)
SWITCHES: tuple[Setting[Any], ...] = (ONCE, NO_REDRIVE, JSON)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcilerConfig:
    """Everything one reconciler process needs: one field per setting."""

    orchestrator_target: str = settings.value(ORCHESTRATOR_TARGET)
    receiver_target: str = settings.value(RECEIVER_TARGET)
    orchestrator_token: str | None = settings.value_or_none(ORCHESTRATOR_TOKEN_FILE)
    receiver_token: str | None = settings.value_or_none(RECEIVER_TOKEN_FILE)
    ca_file: Path | None = settings.value_or_none(CA_FILE)
    allow_cleartext_token: bool = settings.value(INSECURE_CLEARTEXT_TOKEN)
    grace_seconds: float = settings.value(GRACE_SECONDS)
    alert_after_seconds: float = settings.value(ALERT_AFTER_SECONDS)
    batch_size: int = settings.value(BATCH_SIZE)
    timeout_seconds: float = settings.value(TIMEOUT_SECONDS)
    metrics_port: int | None = settings.value_or_none(METRICS.port)
    metrics_address: str = settings.value(METRICS.address)
    unhealthy_after_failed_passes: int = settings.value(UNHEALTHY_AFTER_FAILED_PASSES)
    log_level: str = settings.value(LOGS.level)
    grpc_log_level: str = settings.value(LOGS.grpc_level)
    interval_seconds: float | None = settings.value_or_none(INTERVAL)
    no_redrive: bool = settings.value(NO_REDRIVE)
    json: bool = settings.value(JSON)

    @property
    def once(self) -> bool:
        """True for one pass (--once), False for a pass every interval_seconds (--interval)."""
        return self.interval_seconds is None

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


# The README lists the settings, not the switches (command options, never read from the environment).
SETTINGS = tuple(setting for setting in settings.declared(ReconcilerConfig) if not setting.switch)


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


def _refuse_retired_token_file(
    cli: argparse.ArgumentParser, ns: argparse.Namespace, environ: Mapping[str, str]
) -> None:
    if getattr(ns, RETIRED_TOKEN_FILE.key, None) is not None or environ.get(RETIRED_TOKEN_FILE.env):
        cli.error(
            f"{RETIRED_TOKEN_FILE.names} is retired: give {ORCHESTRATOR_TOKEN_FILE.flag} (role operator) and "
            f"{RECEIVER_TOKEN_FILE.flag} (role effect_reader), one token per service"
        )


def _one_mode(values: SettingValues) -> None:
    if values.required(ONCE) == (values[INTERVAL] is not None):
        raise SettingError(f"give exactly one of {ONCE.flag} and {INTERVAL.flag} SECONDS")


def from_namespace(
    cli: argparse.ArgumentParser, ns: argparse.Namespace, environ: Mapping[str, str]
) -> ReconcilerConfig:
    """Return the configuration from parsed flags and environ; a bad value exits with status 2."""
    _refuse_retired_token_file(cli, ns, environ)
    return settings.load(ReconcilerConfig, cli, ns, environ, check=_one_mode, also=(ONCE,))


def load(argv: Sequence[str], environ: Mapping[str, str]) -> ReconcilerConfig:
    """Return the configuration from argv and environ (a bad value exits with status 2)."""
    cli = parser()
    return from_namespace(cli, cli.parse_args(list(argv)), environ)
