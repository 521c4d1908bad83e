"""The reconciler's configuration: each setting from its flag, else its environment variable, else its default."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from decisionflow.auth import bearer_metadata
from decisionflow.settings import Setting, add_settings, resolve

MAX_BATCH_SIZE = 1000  # the BatchLookup and BatchSettleOperations limit

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "orchestrator_target",
        "DECISIONFLOW_ORCHESTRATOR_TARGET",
        "host:port of the orchestrator (OperationsService)",
        "127.0.0.1:50051",
    ),
    Setting("receiver_target", "DECISIONFLOW_RECEIVER_TARGET", "host:port of the EffectReceiver", "127.0.0.1:50061"),
    Setting(
        "token_file",
        "DECISIONFLOW_RECONCILER_TOKEN_FILE",
        "file holding the bearer token presented to both services (roles operator and effect_reader)",
    ),
    Setting(
        "ca_file",
        "DECISIONFLOW_RECONCILER_CA_FILE",
        "CA bundle (PEM): talk TLS to both services, trusting this CA (unset: plaintext, loopback use)",
    ),
    Setting(
        "grace_seconds",
        "DECISIONFLOW_RECONCILER_GRACE_SECONDS",
        "APPROVED operations older than this are re-driven (younger ones may still be in their own commit step)",
        "30",
    ),
    Setting(
        "alert_after",
        "DECISIONFLOW_RECONCILER_ALERT_AFTER_SECONDS",
        "seconds: exit 1 when an operation decided longer ago than this is still not confirmed after the pass",
        "300",
    ),
    Setting(
        "batch_size",
        "DECISIONFLOW_RECONCILER_BATCH_SIZE",
        f"operations per ListOperations page, BatchLookup and BatchSettleOperations call (1 to {MAX_BATCH_SIZE})",
        "500",
    ),
    Setting(
        "timeout_seconds",
        "DECISIONFLOW_RECONCILER_TIMEOUT_SECONDS",
        "deadline of each call attempt (transient failures are retried within the client policy)",
        "10",
    ),
    Setting(
        "metrics_port",
        "DECISIONFLOW_RECONCILER_METRICS_PORT",
        "serve Prometheus metrics at this port (with --interval only; 0 picks a free one)",
    ),
    Setting(
        "metrics_address",
        "DECISIONFLOW_RECONCILER_METRICS_ADDRESS",
        "address the metrics endpoint binds (0.0.0.0 lets a Prometheus in another container scrape it)",
        "127.0.0.1",
    ),
    Setting("log_level", "DECISIONFLOW_RECONCILER_LOG_LEVEL", "debug, info, warning or error", "warning"),
    Setting("interval", "", "run a pass every SECONDS until SIGTERM or SIGINT", flag_only=True),
)

# Switches: present or absent, never read from the environment.
SWITCHES: tuple[Setting, ...] = (
    Setting("once", "", "run one pass and exit with its status", flag_only=True),
    Setting("no_redrive", "", "never re-drive: only settle and note lookups", flag_only=True),
    Setting("json", "", "print each pass's summary as one JSON object", flag_only=True),
)

_LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True, slots=True)
class ReconcilerConfig:
    """Everything one reconciler process needs."""

    once: bool = True
    interval_seconds: float | None = None
    orchestrator_target: str = "127.0.0.1:50051"
    receiver_target: str = "127.0.0.1:50061"
    token: str | None = None
    ca_file: Path | None = None
    grace_seconds: float = 30.0
    alert_after_seconds: float = 300.0
    batch_size: int = 500
    timeout_seconds: float = 10.0
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    no_redrive: bool = False
    json: bool = False
    log_level: str = "warning"

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


def _seconds(cli: argparse.ArgumentParser, name: str, text: str | None, *, zero_ok: bool) -> float:
    try:
        value = float(text or "")
    except ValueError:
        cli.error(f"{name} must be a number of seconds, not {text!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        cli.error(f"{name} must be {'non-negative' if zero_ok else 'positive'}, not {text!r}")
    return value


def _integer(cli: argparse.ArgumentParser, name: str, text: str | None, low: int, high: int) -> int:
    try:
        value = int(text or "")
    except ValueError:
        cli.error(f"{name} must be a whole number, not {text!r}")
    if not low <= value <= high:
        cli.error(f"{name} must be {low} to {high}, not {value}")
    return value


def _token(cli: argparse.ArgumentParser, path: str | None) -> str | None:
    if not path:
        return None
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeError) as exc:
        cli.error(f"cannot read token_file: {exc}")
    try:
        bearer_metadata(token)
    except ValueError as exc:
        cli.error(f"token_file {path}: {exc}")
    return token


def _ca_file(cli: argparse.ArgumentParser, path: str | None) -> Path | None:
    if not path:
        return None
    if not Path(path).is_file():
        cli.error(f"ca_file {path} is not a readable file")
    return Path(path)


def parser() -> argparse.ArgumentParser:
    """Return the command-line parser of decisionflow-reconciler."""
    cli = argparse.ArgumentParser(
        prog="decisionflow-reconciler",
        description="Settle operations whose outcome is Unknown by asking the EffectReceiver. Exit status: "
        "0 nothing older than --alert-after is left unconfirmed, 1 something is, 2 could not run.",
    )
    add_settings(cli, SETTINGS)
    for switch in SWITCHES:
        cli.add_argument(
            switch.flag, dest=switch.key, action="store_const", const="true", default=None, help=switch.help
        )
    return cli


def from_namespace(
    cli: argparse.ArgumentParser, ns: argparse.Namespace, environ: Mapping[str, str]
) -> ReconcilerConfig:
    """Return the configuration from parsed flags and environ; a bad value exits with status 2."""
    values = resolve(ns, (*SETTINGS, *SWITCHES), environ)
    once = values["once"] == "true"
    interval = values["interval"]
    if once == (interval is not None):
        cli.error("give exactly one of --once and --interval SECONDS")
    log_level = (values["log_level"] or "").lower()
    if log_level not in _LOG_LEVELS:
        cli.error(f"log_level must be one of {', '.join(_LOG_LEVELS)}, not {log_level!r}")
    for target in ("orchestrator_target", "receiver_target"):
        if not values[target]:
            cli.error(f"{target} must not be empty")
    metrics_text = values["metrics_port"]
    return ReconcilerConfig(
        once=once,
        interval_seconds=None if interval is None else _seconds(cli, "interval", interval, zero_ok=False),
        orchestrator_target=values["orchestrator_target"] or "",
        receiver_target=values["receiver_target"] or "",
        token=_token(cli, values["token_file"]),
        ca_file=_ca_file(cli, values["ca_file"]),
        grace_seconds=_seconds(cli, "grace_seconds", values["grace_seconds"], zero_ok=True),
        alert_after_seconds=_seconds(cli, "alert_after_seconds", values["alert_after"], zero_ok=True),
        batch_size=_integer(cli, "batch_size", values["batch_size"], 1, MAX_BATCH_SIZE),
        timeout_seconds=_seconds(cli, "timeout_seconds", values["timeout_seconds"], zero_ok=False),
        metrics_port=_integer(cli, "metrics_port", metrics_text, 0, 65535) if metrics_text else None,
        metrics_address=values["metrics_address"] or "127.0.0.1",
        no_redrive=values["no_redrive"] == "true",
        json=values["json"] == "true",
        log_level=log_level,
    )


def load(argv: Sequence[str], environ: Mapping[str, str]) -> ReconcilerConfig:
    """Return the configuration from argv and environ (a bad value exits with status 2)."""
    cli = parser()
    return from_namespace(cli, cli.parse_args(list(argv)), environ)
