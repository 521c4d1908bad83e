"""The orchestrator's configuration: each setting from its flag, else its environment variable, else
its default, parsed by the setting's own parser."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decisionflow.transparency import NoteSigner
from decisionflow_server.foundation import arguments, settings
from decisionflow_server.foundation.settings import Setting, SettingError, add_settings, parse_settings
from decisionflow_server.runtime import server_security
from decisionflow_server.runtime.failpoints import Failpoints
from decisionflow_server.runtime.server_security import ServerSecurity
from decisionflow_server.runtime.serving import TransportLimits
from orchestrator.audit.signing import DEFAULT_ORIGIN, CheckpointSigner, origin, signing_key
from orchestrator.checkpoints import MIN_KEY_BYTES
from orchestrator.failpoints import FAILPOINTS
from orchestrator.quotas import AuthorLimits
from orchestrator.validation import MAX_CONTENT_BYTES


def _failpoints(value: str) -> str:
    Failpoints(value, FAILPOINTS)  # refuse a typo at start-up, not at the first decision
    return value


ADDRESS = Setting(
    "address",
    "DECISIONFLOW_ORCHESTRATOR_ADDRESS",
    "host:port to listen on (port 0 picks a free one)",
    "127.0.0.1:50051",
    parse=settings.target,
)
DATABASE_URL = Setting(
    "database_url",
    "DECISIONFLOW_ORCHESTRATOR_DATABASE_URL",
    "orchestrator database: a SQLite path or URL, or a postgresql:// URL (shared by replicas)",
    "orchestrator.db",
    parse=settings.non_empty,
)
DATABASE_URL_FILE = settings.database_url_file_setting("ORCHESTRATOR")
MIGRATE = settings.migrate_setting("ORCHESTRATOR", "decisionflow-orchestrator")
RECEIVER_TARGET = Setting(
    "receiver_target",
    "DECISIONFLOW_RECEIVER_TARGET",
    "host:port of the EffectReceiver",
    "127.0.0.1:50061",
    parse=settings.target,
)
RECEIVER_TOKEN_FILE = Setting(
    "receiver_token_file",
    "DECISIONFLOW_RECEIVER_TOKEN_FILE",
    "file holding the bearer token the orchestrator presents to the receiver (role effect_writer)",
    parse=settings.token_file,
)
RECEIVER_CA_FILE = Setting(
    "receiver_ca_file",
    "DECISIONFLOW_RECEIVER_CA_FILE",
    "CA bundle of the receiver's certificate: call the receiver over TLS",
    parse=settings.readable_file,
)
RECEIVER_INSECURE_CLEARTEXT_TOKEN = settings.cleartext_token_setting(
    "receiver_insecure_cleartext_token", "DECISIONFLOW_RECEIVER_INSECURE_CLEARTEXT_TOKEN", "the receiver"
)
RECEIVER_TIMEOUT_SECONDS = Setting(
    "receiver_timeout_seconds",
    "DECISIONFLOW_RECEIVER_TIMEOUT_SECONDS",
    "time budget of one attempt's Apply, retries included, whatever the caller's deadline (a shorter one "
    "shortens it); an attempt's lease holds its operation this long and 1 s more",
    "5",
    parse=settings.positive_seconds,
)
CHECKPOINT_KEYS = Setting(
    "checkpoint_keys",
    "DECISIONFLOW_CHECKPOINT_KEYS",
    f"comma-separated HMAC keys (each at least {MIN_KEY_BYTES} bytes); the first seals, all verify",
    parse=settings.checkpoint_keys(MIN_KEY_BYTES),
)
CHECKPOINT_KEYS_FILE = Setting(
    "checkpoint_keys_file",
    "DECISIONFLOW_CHECKPOINT_KEYS_FILE",
    "file holding the checkpoint keys, in the form of --checkpoint-keys (give one of the two)",
    parse=settings.from_file(settings.checkpoint_keys(MIN_KEY_BYTES)),
)
AUDIT_SIGNING_KEY_FILE = Setting(
    "audit_signing_key_file",
    "DECISIONFLOW_AUDIT_SIGNING_KEY_FILE",
    "file holding the audit log's Ed25519 signing key (PRIVATE+KEY+<name>+<key id>+<key>, made by "
    "decisionflow-orchestrator audit-keygen; never the checkpoint keys); unset: the log is written and "
    "sequenced but no checkpoint is signed",
    parse=settings.from_file(signing_key),
)
AUDIT_ORIGIN = Setting(
    "audit_origin",
    "DECISIONFLOW_AUDIT_ORIGIN",
    "the audit log's name, the first line of its checkpoints (by convention its signing key's name too)",
    DEFAULT_ORIGIN,
    parse=origin,
)
AUDIT_INTERVAL_SECONDS = Setting(
    "audit_interval_seconds",
    "DECISIONFLOW_AUDIT_INTERVAL_SECONDS",
    "how often the server sequences the audit log's new entries and signs a checkpoint of it (one replica at a "
    "time); 0: never in the server (run decisionflow-orchestrator audit-checkpoint instead)",
    "10",
    parse=settings.seconds,
)
FOUR_EYES = Setting(
    "four_eyes",
    "DECISIONFLOW_FOUR_EYES",
    "true: nobody who created a proposal, or any proposal it was edited from or replaced, can decide it "
    "(true/false, yes/no, on/off, 1/0)",
    "false",
    parse=settings.boolean,
)
# Per-author budgets (orchestrator.quotas): the defaults let a person or a drafting job work freely and
# stop one token from writing thousands of proposals in seconds, as one was seen to.
AUTHOR_CALLS_PER_SECOND = Setting(
    "author_calls_per_second",
    "DECISIONFLOW_AUTHOR_CALLS_PER_SECOND",
    "StartReview and EditProposal calls one principal may sustain per second, counted in each server process "
    "(each worker and replica keeps its own count); beyond it: RESOURCE_EXHAUSTED, CALL_RATE_EXCEEDED, with "
    "the delay to wait; 0: no limit",
    "20",
    parse=settings.rate,
)
AUTHOR_CALL_BURST = Setting(
    "author_call_burst",
    "DECISIONFLOW_AUTHOR_CALL_BURST",
    "StartReview and EditProposal calls one principal may make at once before --author-calls-per-second applies",
    "100",
    parse=settings.integer(1, 1_000_000),
)
AUTHOR_CONTENT_BYTES_PER_MINUTE = Setting(
    "author_content_bytes_per_minute",
    "DECISIONFLOW_AUTHOR_CONTENT_BYTES_PER_MINUTE",
    "bytes of proposal text (body, evidence, policy) one principal may send per minute in StartReview and "
    "EditProposal, at most a minute's worth at once, counted in each server process; beyond it: "
    f"RESOURCE_EXHAUSTED, CONTENT_BUDGET_EXCEEDED, with the delay to wait; 0: no limit, else at least "
    f"{MAX_CONTENT_BYTES} (the largest valid proposal)",
    "16777216",
    parse=settings.zero_or_integer(MAX_CONTENT_BYTES, 2**40),
)
AUTHOR_OPEN_REVIEWS = Setting(
    "author_open_reviews",
    "DECISIONFLOW_AUTHOR_OPEN_REVIEWS",
    "undecided proposals of one author the reviewers' inbox may hold, counted in the database (so across "
    "every replica); a StartReview or EditProposal that would add one more is refused: FAILED_PRECONDITION, "
    "TOO_MANY_OPEN_REVIEWS; 0: no limit",
    "1000",
    parse=settings.integer(0, 100_000_000),
)
FAILPOINTS_SETTING = Setting(
    "failpoints",
    "DECISIONFLOW_ORCHESTRATOR_FAILPOINTS",
    "fault injection, e.g. orchestrator.after_decision=exit (names: " + ", ".join(FAILPOINTS) + ")",
    "",
    parse=_failpoints,
)
TRANSPORT = settings.transport_settings("ORCHESTRATOR")
SHUTDOWN_GRACE_SECONDS = settings.shutdown_grace_setting("ORCHESTRATOR")
LOG_LEVEL = settings.log_level_setting("ORCHESTRATOR", "info")
GRPC_LOG_LEVEL = settings.grpc_log_level_setting("ORCHESTRATOR")
METRICS = settings.metrics_settings("ORCHESTRATOR", workers=True)
PORT_FILE = settings.PORT_FILE
WORKERS = settings.workers_setting("ORCHESTRATOR")

SETTINGS: tuple[Setting[Any], ...] = (
    ADDRESS,
    DATABASE_URL,
    DATABASE_URL_FILE,
    MIGRATE,
    RECEIVER_TARGET,
    RECEIVER_TOKEN_FILE,
    RECEIVER_CA_FILE,
    RECEIVER_INSECURE_CLEARTEXT_TOKEN,
    RECEIVER_TIMEOUT_SECONDS,
    CHECKPOINT_KEYS,
    CHECKPOINT_KEYS_FILE,
    AUDIT_SIGNING_KEY_FILE,
    AUDIT_ORIGIN,
    AUDIT_INTERVAL_SECONDS,
    *server_security.SETTINGS,
    *TRANSPORT.all,
    *METRICS.all,
    WORKERS,
    FOUR_EYES,
    AUTHOR_CALLS_PER_SECOND,
    AUTHOR_CALL_BURST,
    AUTHOR_CONTENT_BYTES_PER_MINUTE,
    AUTHOR_OPEN_REVIEWS,
    FAILPOINTS_SETTING,
    SHUTDOWN_GRACE_SECONDS,
    LOG_LEVEL,
    GRPC_LOG_LEVEL,
    PORT_FILE,
)

# The housekeeping commands read these, with the same parsers as the server.
HOUSEKEEPING_SETTINGS: tuple[Setting[Any], ...] = (
    DATABASE_URL,
    DATABASE_URL_FILE,
    CHECKPOINT_KEYS,
    CHECKPOINT_KEYS_FILE,
    LOG_LEVEL,
)

# decisionflow-orchestrator audit-checkpoint reads these, with the same parsers as the server.
AUDIT_SETTINGS: tuple[Setting[Any], ...] = (
    DATABASE_URL,
    DATABASE_URL_FILE,
    AUDIT_SIGNING_KEY_FILE,
    AUDIT_ORIGIN,
    LOG_LEVEL,
)


@dataclass(frozen=True, slots=True)
class OrchestratorConfig:
    """Everything the orchestrator process needs to start."""

    checkpoint_keys: tuple[bytes, ...]
    address: str = "127.0.0.1:50051"
    database_url: str = "orchestrator.db"
    migrate_at_start: bool = True
    receiver_target: str = "127.0.0.1:50061"
    receiver_token: str | None = None
    receiver_ca_file: Path | None = None
    receiver_allow_cleartext_token: bool = False
    receiver_timeout_seconds: float = 5.0
    security: ServerSecurity = field(default_factory=ServerSecurity)
    transport: TransportLimits = field(default_factory=TransportLimits)
    four_eyes: bool = False
    author_limits: AuthorLimits = field(default_factory=AuthorLimits)
    audit_signer: CheckpointSigner | None = None
    audit_interval_seconds: float = 10.0
    failpoints: str = ""
    shutdown_grace_seconds: float = 10.0
    log_level: str = "info"
    grpc_log_level: str = "error"
    port_file: Path | None = None
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    workers: int = 1


def audit_signer(key: NoteSigner | None, log_origin: str) -> CheckpointSigner | None:
    """The audit log's checkpoint signer, None without a signing key."""
    return None if key is None else CheckpointSigner(log_origin, key)


def add_to(cli: argparse.ArgumentParser) -> None:
    """Add the orchestrator's settings to a parser."""
    add_settings(cli, SETTINGS)


def from_namespace(
    cli: argparse.ArgumentParser, ns: argparse.Namespace, environ: Mapping[str, str]
) -> OrchestratorConfig:
    """Return the configuration from parsed flags and environ; a bad value exits with status 2."""
    try:
        values = parse_settings(ns, SETTINGS, environ)
        settings.check_workers_address(values.required(WORKERS), values.required(ADDRESS), WORKERS, ADDRESS)
        return OrchestratorConfig(
            checkpoint_keys=values.required_one_of(CHECKPOINT_KEYS, CHECKPOINT_KEYS_FILE),
            address=values.required(ADDRESS),
            database_url=values.required_one_of(DATABASE_URL, DATABASE_URL_FILE),
            migrate_at_start=values.required(MIGRATE),
            receiver_target=values.required(RECEIVER_TARGET),
            receiver_token=values[RECEIVER_TOKEN_FILE],
            receiver_ca_file=values[RECEIVER_CA_FILE],
            receiver_allow_cleartext_token=values.required(RECEIVER_INSECURE_CLEARTEXT_TOKEN),
            receiver_timeout_seconds=values.required(RECEIVER_TIMEOUT_SECONDS),
            security=server_security.from_values(values),
            transport=TransportLimits.from_values(values, TRANSPORT),
            four_eyes=values.required(FOUR_EYES),
            author_limits=AuthorLimits(
                calls_per_second=values.required(AUTHOR_CALLS_PER_SECOND),
                call_burst=values.required(AUTHOR_CALL_BURST),
                content_bytes_per_minute=values.required(AUTHOR_CONTENT_BYTES_PER_MINUTE),
                open_reviews=values.required(AUTHOR_OPEN_REVIEWS),
            ),
            audit_signer=audit_signer(values[AUDIT_SIGNING_KEY_FILE], values.required(AUDIT_ORIGIN)),
            audit_interval_seconds=values.required(AUDIT_INTERVAL_SECONDS),
            failpoints=values.required(FAILPOINTS_SETTING),
            shutdown_grace_seconds=values.required(SHUTDOWN_GRACE_SECONDS),
            log_level=values.required(LOG_LEVEL),
            grpc_log_level=values.required(GRPC_LOG_LEVEL),
            port_file=values[PORT_FILE],
            metrics_port=values[METRICS.port],
            metrics_address=values.required(METRICS.address),
            workers=values.required(WORKERS),
        )
    except SettingError as error:
        cli.error(str(error))


def load(argv: Sequence[str], environ: Mapping[str, str]) -> OrchestratorConfig:
    """Return the serving configuration from argv and environ (used by tests and ``serve``)."""
    cli = arguments.ArgumentParser(prog="decisionflow-orchestrator")
    add_to(cli)
    return from_namespace(cli, cli.parse_args(list(argv)), environ)
