"""The orchestrator's configuration: one declaration per setting (flag, environment variable, default,
parser, help), and OrchestratorConfig, whose fields name them in the order the help and the README
list them. Each value comes from its flag, else its environment variable, else its default."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decisionflow.transparency import NoteSigner
from decisionflow_server.foundation import arguments, settings
from decisionflow_server.foundation.settings import Setting, SettingValues, add_settings
from decisionflow_server.runtime import server_security
from decisionflow_server.runtime.failpoints import failpoints_setting
from decisionflow_server.runtime.server_security import ServerSecurity
from decisionflow_server.runtime.serving import TransportLimits
from orchestrator.audit_log.feed import FeedSettings
from orchestrator.audit_log.signing import DEFAULT_ORIGIN, CheckpointSigner, origin, signing_key
from orchestrator.checkpoints import MIN_KEY_BYTES
from orchestrator.failpoints import FAILPOINTS
from orchestrator.quotas import AuthorLimits
from orchestrator.validation import MAX_CONTENT_BYTES

DATABASE_URL = Setting(
    "database_url",
    "DECISIONFLOW_ORCHESTRATOR_DATABASE_URL",
    "orchestrator database: a SQLite path or URL, or a postgresql:// URL (shared by replicas)",
    "orchestrator.db",
    parse=settings.non_empty,
)
RECEIVER_TARGET = settings.receiver_target_setting()
RECEIVER_TOKEN_FILE = Setting(
    "receiver_token_file",
    "DECISIONFLOW_RECEIVER_TOKEN_FILE",
    "file holding the bearer token the orchestrator presents to the receiver (role effect_writer)",
    parse=settings.token_file,
)
RECEIVER_CA_FILE, RECEIVER_INSECURE_CLEARTEXT_TOKEN = settings.receiver_tls_settings("receiver_")
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
    parse=settings.checkpoint_keys(min_bytes=MIN_KEY_BYTES),
)
CHECKPOINT_KEYS_FILE = settings.in_file(
    CHECKPOINT_KEYS, "file holding the checkpoint keys, in the form of --checkpoint-keys (give one of the two)"
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
AUDIT_PUBLISH_DIR = Setting(
    "audit_publish_dir",
    "DECISIONFLOW_AUDIT_PUBLISH_DIR",
    "directory, outside the database and never restored with it, where the sequencer publishes each signed "
    "checkpoint (tlog-tiles layout: <dir>/checkpoint, also served as /checkpoint on the metrics endpoint); "
    "it signs nothing that does not extend the checkpoint published there; unset: nothing is published",
    parse=settings.path,
)
AUDIT_INTERVAL_SECONDS = Setting(
    "audit_interval_seconds",
    "DECISIONFLOW_AUDIT_INTERVAL_SECONDS",
    "how often the server sequences the audit log's new entries and signs a checkpoint of it (one replica at a "
    "time); 0: never in the server (run decisionflow-orchestrator audit-checkpoint instead)",
    "10",
    parse=settings.seconds,
)
REVIEW_RULES_FILE = Setting(
    "review_rules_file",
    "DECISIONFLOW_REVIEW_RULES_FILE",
    "TOML file of review rules: per action, the stages of approval a review goes through (docs/review-rules.md); "
    "read at start-up (a file with a problem stops it, naming FILE:LINE) and again on SIGHUP (a file with a "
    "problem keeps the rules in force); unset: every action follows the default rule (any reviewer, one approval)",
    parse=settings.path,
)
REVIEW_TIMER_INTERVAL_SECONDS = Setting(
    "review_timer_interval_seconds",
    "DECISIONFLOW_REVIEW_TIMER_INTERVAL_SECONDS",
    "how often the server escalates the stages of reviews past their due time and expires reviews past their "
    "rule's deadline (one replica at a time, up to a fifth of the interval later; docs/review-rules.md); "
    "0: never (nothing escalates, and only expire-reviews expires)",
    "30",
    parse=settings.seconds,
)
REVIEW_TIMER_BATCH_SIZE = Setting(
    "review_timer_batch_size",
    "DECISIONFLOW_REVIEW_TIMER_BATCH_SIZE",
    "open reviews under a rule the review timer reads per query (each is then decided in a transaction of its own)",
    "200",
    parse=settings.integer(1, 10000),
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
# The event feed (orchestrator.events, docs/events.md).
EVENTS_POLL_SECONDS = Setting(
    "events_poll_seconds",
    "DECISIONFLOW_EVENTS_POLL_SECONDS",
    "while a WatchEvents stream is open, how often the server sequences the audit log's new entries and sends "
    "them to its watchers (an event reaches a watcher about this long after it commits)",
    "0.1",
    parse=settings.positive_seconds,
)
EVENTS_HEARTBEAT_SECONDS = Setting(
    "events_heartbeat_seconds",
    "DECISIONFLOW_EVENTS_HEARTBEAT_SECONDS",
    "a WatchEvents stream with nothing to send sends a heartbeat (its position) this often, which keeps it alive "
    "through proxies",
    "5",
    parse=settings.positive_seconds,
)
EVENTS_STREAMS_PER_PRINCIPAL = Setting(
    "events_streams_per_principal",
    "DECISIONFLOW_EVENTS_STREAMS_PER_PRINCIPAL",
    "WatchEvents streams one principal may hold open at once, counted in each server process (each "
    "wait_for_outcome holds one while it waits; an idle stream costs about 30 KiB); one more: "
    "RESOURCE_EXHAUSTED, TOO_MANY_STREAMS",
    "64",
    parse=settings.integer(1, 100_000),
)
EVENTS_STALL_SECONDS = Setting(
    "events_stall_seconds",
    "DECISIONFLOW_EVENTS_STALL_SECONDS",
    "a WatchEvents stream whose caller has not taken the next message for this long (its transport buffer is "
    "full) is closed with UNAVAILABLE, WATCH_FELL_BEHIND and the index to resume from",
    "30",
    parse=settings.positive_seconds,
)
FAILPOINTS_SETTING = failpoints_setting("ORCHESTRATOR", FAILPOINTS, "orchestrator.after_decision=exit")


# What every server declares alike: its address, the database URL file, migration, transport limits,
# metrics, workers, shutdown grace, log levels and the port file.
SERVER = settings.server_settings("ORCHESTRATOR", "decisionflow-orchestrator", settings.ORCHESTRATOR_ADDRESS)

# decisionflow-orchestrator audit-checkpoint reads these, with the same parsers as the server.
AUDIT_SETTINGS: tuple[Setting[Any], ...] = (
    DATABASE_URL,
    SERVER.database_url_file,
    AUDIT_SIGNING_KEY_FILE,
    AUDIT_ORIGIN,
    AUDIT_PUBLISH_DIR,
    SERVER.logs.level,
)


def audit_signer(values: SettingValues) -> CheckpointSigner | None:
    """The audit log's checkpoint signer, None without a signing key."""
    key: NoteSigner | None = values[AUDIT_SIGNING_KEY_FILE]
    return None if key is None else CheckpointSigner(values.required(AUDIT_ORIGIN), key)


@dataclass(frozen=True, slots=True, kw_only=True)
class OrchestratorConfig:
    """Everything the orchestrator process needs to start: a field per setting, or per group of them (security,
    transport, the author budgets); only the checkpoint keys have no default."""

    address: str = settings.value(SERVER.address)
    database_url: str = settings.value(DATABASE_URL, or_file=SERVER.database_url_file)
    migrate_at_start: bool = settings.value(SERVER.migrate)
    receiver_target: str = settings.value(RECEIVER_TARGET)
    receiver_token: str | None = settings.value_or_none(RECEIVER_TOKEN_FILE)
    receiver_ca_file: Path | None = settings.value_or_none(RECEIVER_CA_FILE)
    receiver_allow_cleartext_token: bool = settings.value(RECEIVER_INSECURE_CLEARTEXT_TOKEN)
    receiver_timeout_seconds: float = settings.value(RECEIVER_TIMEOUT_SECONDS)
    checkpoint_keys: tuple[bytes, ...] = settings.required(CHECKPOINT_KEYS, or_file=CHECKPOINT_KEYS_FILE)
    security: ServerSecurity = server_security.from_settings()
    transport: TransportLimits = TransportLimits.from_settings(SERVER.transport)
    metrics_port: int | None = settings.value_or_none(SERVER.metrics.port)
    metrics_address: str = settings.value(SERVER.metrics.address)
    workers: int = settings.value(SERVER.workers)
    review_rules_file: Path | None = settings.value_or_none(REVIEW_RULES_FILE)
    review_timer_interval_seconds: float = settings.value(REVIEW_TIMER_INTERVAL_SECONDS)
    review_timer_batch_size: int = settings.value(REVIEW_TIMER_BATCH_SIZE)
    four_eyes: bool = settings.value(FOUR_EYES)
    author_limits: AuthorLimits = settings.group(
        AuthorLimits,
        calls_per_second=AUTHOR_CALLS_PER_SECOND,
        call_burst=AUTHOR_CALL_BURST,
        content_bytes_per_minute=AUTHOR_CONTENT_BYTES_PER_MINUTE,
        open_reviews=AUTHOR_OPEN_REVIEWS,
    )
    audit_signer: CheckpointSigner | None = settings.part((AUDIT_SIGNING_KEY_FILE, AUDIT_ORIGIN), audit_signer)
    audit_publish_dir: Path | None = settings.value_or_none(AUDIT_PUBLISH_DIR)
    audit_interval_seconds: float = settings.value(AUDIT_INTERVAL_SECONDS)
    events: FeedSettings = settings.group(
        FeedSettings,
        poll_seconds=EVENTS_POLL_SECONDS,
        heartbeat_seconds=EVENTS_HEARTBEAT_SECONDS,
        streams_per_principal=EVENTS_STREAMS_PER_PRINCIPAL,
        stall_seconds=EVENTS_STALL_SECONDS,
    )
    failpoints: str = settings.value(FAILPOINTS_SETTING)
    shutdown_grace_seconds: float = settings.value(SERVER.shutdown_grace)
    log_level: str = settings.value(SERVER.logs.level)
    grpc_log_level: str = settings.value(SERVER.logs.grpc_level)
    port_file: Path | None = settings.value_or_none(SERVER.port_file)


SETTINGS = settings.declared(OrchestratorConfig)


def add_to(cli: argparse.ArgumentParser) -> None:
    """Add the orchestrator's settings to a parser."""
    add_settings(cli, SETTINGS)


def from_namespace(
    cli: argparse.ArgumentParser, ns: argparse.Namespace, environ: Mapping[str, str]
) -> OrchestratorConfig:
    """Return the configuration from parsed flags and environ; a bad value exits with status 2."""
    return settings.load(OrchestratorConfig, cli, ns, environ, check=SERVER.check_workers)


def load(argv: Sequence[str], environ: Mapping[str, str]) -> OrchestratorConfig:
    """Return the serving configuration from argv and environ (used by tests and ``serve``)."""
    cli = arguments.ArgumentParser(prog="decisionflow-orchestrator")
    add_to(cli)
    return from_namespace(cli, cli.parse_args(list(argv)), environ)
