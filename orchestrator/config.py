"""The orchestrator's configuration: each setting from its flag, else its environment variable, else its default."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from decisionflow import server_security
from decisionflow.failpoints import Failpoints
from decisionflow.server_security import ServerSecurity
from decisionflow.settings import Setting, add_settings, resolve
from orchestrator.checkpoints import MIN_KEY_BYTES
from orchestrator.failpoints import FAILPOINTS

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "address",
        "DECISIONFLOW_ORCHESTRATOR_ADDRESS",
        "host:port to listen on (port 0 picks a free one)",
        "127.0.0.1:50051",
    ),
    Setting(
        "database_url",
        "DECISIONFLOW_ORCHESTRATOR_DATABASE_URL",
        "orchestrator database: a SQLite path or URL, or a postgresql:// URL (shared by replicas)",
        "orchestrator.db",
    ),
    Setting("receiver_target", "DECISIONFLOW_RECEIVER_TARGET", "host:port of the EffectReceiver", "127.0.0.1:50061"),
    Setting(
        "receiver_token_file",
        "DECISIONFLOW_RECEIVER_TOKEN_FILE",
        "file holding the bearer token the orchestrator presents to the receiver (role effect_writer)",
    ),
    Setting(
        "receiver_ca_file",
        "DECISIONFLOW_RECEIVER_CA_FILE",
        "CA bundle of the receiver's certificate: call the receiver over TLS",
    ),
    Setting(
        "receiver_timeout_seconds",
        "DECISIONFLOW_RECEIVER_TIMEOUT_SECONDS",
        "time budget for Apply (with retries) when the caller set no deadline",
        "5",
    ),
    Setting(
        "checkpoint_keys",
        "DECISIONFLOW_CHECKPOINT_KEYS",
        f"comma-separated HMAC keys (each at least {MIN_KEY_BYTES} characters); the first seals, all verify",
    ),
    *server_security.SETTINGS,
    Setting("four_eyes", "DECISIONFLOW_FOUR_EYES", "true: the author of a proposal cannot decide it", "false"),
    Setting(
        "failpoints",
        "DECISIONFLOW_ORCHESTRATOR_FAILPOINTS",
        "fault injection, e.g. orchestrator.after_decision=exit (names: " + ", ".join(FAILPOINTS) + ")",
        "",
    ),
    Setting(
        "shutdown_grace_seconds",
        "DECISIONFLOW_ORCHESTRATOR_SHUTDOWN_GRACE_SECONDS",
        "on SIGTERM/SIGINT, how long calls in flight may finish",
        "10",
    ),
    Setting("log_level", "DECISIONFLOW_ORCHESTRATOR_LOG_LEVEL", "debug, info, warning or error", "info"),
    Setting("port_file", "", "write the bound port to this file once serving", flag_only=True),
)

_LOG_LEVELS = ("debug", "info", "warning", "error")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


@dataclass(frozen=True, slots=True)
class OrchestratorConfig:
    """Everything the orchestrator process needs to start."""

    checkpoint_keys: tuple[bytes, ...]
    address: str = "127.0.0.1:50051"
    database_url: str = "orchestrator.db"
    receiver_target: str = "127.0.0.1:50061"
    receiver_token: str | None = None
    receiver_ca_file: Path | None = None
    receiver_timeout_seconds: float = 5.0
    security: ServerSecurity = field(default_factory=ServerSecurity)
    four_eyes: bool = False
    failpoints: str = ""
    shutdown_grace_seconds: float = 10.0
    log_level: str = "info"
    port_file: Path | None = None


def _seconds(cli: argparse.ArgumentParser, name: str, text: str | None, *, zero_ok: bool) -> float:
    try:
        value = float(text or "")
    except ValueError:
        cli.error(f"{name} must be a number of seconds, not {text!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        cli.error(f"{name} must be {'non-negative' if zero_ok else 'positive'}, not {text!r}")
    return value


def _path(text: str | None) -> Path | None:
    return Path(text) if text else None


def add_to(cli: argparse.ArgumentParser) -> None:
    """Add the orchestrator's settings to a parser."""
    add_settings(cli, SETTINGS)


def from_namespace(
    cli: argparse.ArgumentParser, ns: argparse.Namespace, environ: Mapping[str, str]
) -> OrchestratorConfig:
    """Return the configuration from parsed flags and environ; a bad value exits with status 2."""
    values = resolve(ns, SETTINGS, environ)
    keys = tuple(k.strip().encode() for k in (values["checkpoint_keys"] or "").split(",") if k.strip())
    if not keys:
        cli.error("checkpoint_keys is required (--checkpoint-keys or DECISIONFLOW_CHECKPOINT_KEYS)")
    if any(len(k) < MIN_KEY_BYTES for k in keys):
        cli.error(f"every checkpoint key must be at least {MIN_KEY_BYTES} characters")
    four_eyes_text = (values["four_eyes"] or "").lower()
    if four_eyes_text not in _TRUE + _FALSE:
        cli.error(f"four_eyes must be true or false, not {four_eyes_text!r}")
    log_level = (values["log_level"] or "").lower()
    if log_level not in _LOG_LEVELS:
        cli.error(f"log_level must be one of {', '.join(_LOG_LEVELS)}, not {log_level!r}")
    failpoints = values["failpoints"] or ""
    try:
        Failpoints(failpoints, FAILPOINTS)
    except ValueError as exc:
        cli.error(str(exc))
    token = None
    token_file = values["receiver_token_file"]
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            cli.error(f"cannot read receiver_token_file: {exc}")
    try:
        security = server_security.from_values(values)
    except ValueError as exc:
        cli.error(str(exc))
    return OrchestratorConfig(
        checkpoint_keys=keys,
        address=values["address"] or "",
        database_url=values["database_url"] or "",
        receiver_target=values["receiver_target"] or "",
        receiver_token=token,
        receiver_ca_file=_path(values["receiver_ca_file"]),
        receiver_timeout_seconds=_seconds(
            cli, "receiver_timeout_seconds", values["receiver_timeout_seconds"], zero_ok=False
        ),
        security=security,
        four_eyes=four_eyes_text in _TRUE,
        failpoints=failpoints,
        shutdown_grace_seconds=_seconds(cli, "shutdown_grace_seconds", values["shutdown_grace_seconds"], zero_ok=True),
        log_level=log_level,
        port_file=_path(values["port_file"]),
    )


def load(argv: Sequence[str], environ: Mapping[str, str]) -> OrchestratorConfig:
    """Return the serving configuration from argv and environ (used by tests and ``serve``)."""
    cli = argparse.ArgumentParser(prog="decisionflow-orchestrator")
    add_to(cli)
    return from_namespace(cli, cli.parse_args(list(argv)), environ)
