"""Wiring of the orchestrator process: configuration, database, workflow, receiver client, server.

With its commands, the only reader of the environment. ``decisionflow-orchestrator serve`` (the
default) runs the server; ``migrate`` upgrades the schema (decisionflow_server.storage.migrating);
``prune-checkpoints``, ``expire-reviews`` and ``reopen-reviews`` are the operators' housekeeping
commands (orchestrator.housekeeping_commands); ``audit-checkpoint`` and ``audit-keygen`` are the audit
log's (orchestrator.audit.commands).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import grpc
from sqlalchemy.engine import Engine

from decisionflow.channels import MAX_MESSAGE_BYTES, check_cleartext_token
from decisionflow.v1 import (
    audit_pb2,
    audit_pb2_grpc,
    common_pb2,
    events_pb2,
    events_pb2_grpc,
    operations_pb2,
    operations_pb2_grpc,
    review_pb2,
    review_pb2_grpc,
)
from decisionflow_server.foundation import arguments, logs
from decisionflow_server.foundation.version import add_version_flag
from decisionflow_server.runtime import startup
from decisionflow_server.runtime.failpoints import Failpoints
from decisionflow_server.runtime.host import Command, Host, Service, Wiring, command_line
from decisionflow_server.runtime.serving import ReceiveLimits
from decisionflow_server.storage import migrating
from orchestrator import config as configuration
from orchestrator import housekeeping_commands
from orchestrator.audit import commands as audit_commands
from orchestrator.audit.grpc_api import AuditServicer
from orchestrator.audit.publication import CheckpointDirectory
from orchestrator.audit.sequencer import audit_job
from orchestrator.audit.service import AuditLog
from orchestrator.audit_log.ports import AuditLogReader
from orchestrator.checkpoints import CheckpointSealer
from orchestrator.config import OrchestratorConfig
from orchestrator.effects import ReceiverEffects
from orchestrator.events.feed import EventFeed, Watching
from orchestrator.events.grpc_api import EventServicer
from orchestrator.failpoints import FAILPOINTS
from orchestrator.grpc_api import STATUS_TABLE, OperationsServicer, ReviewServicer
from orchestrator.holders import LeaseHolder
from orchestrator.keycheck import check_checkpoint_keys, warn_unreadable_checkpoints
from orchestrator.metrics import OrchestratorMetrics
from orchestrator.ports import EffectPort
from orchestrator.quotas import AuthorBudgets
from orchestrator.review_timer import review_timer_job
from orchestrator.rules_in_force import RulesInForce
from orchestrator.service import AttemptBudget, OrchestratorService
from orchestrator.store import MIGRATIONS, VERSION_TABLE, OrchestratorStore
from orchestrator.validation import MAX_BODY_BYTES, MAX_EVIDENCE, MAX_INT, MAX_QUOTATION_BYTES, MAX_RULES
from orchestrator.workflow import ReviewWorkflow, without_framework_spans

logger = logging.getLogger("decisionflow.orchestrator")
PROGRAM = "decisionflow-orchestrator"
SCHEMA = migrating.Schema(
    PROGRAM,
    "orchestrator",
    MIGRATIONS,
    VERSION_TABLE,
    configuration.DATABASE_URL,
    configuration.SERVER.database_url_file,
    configuration.SERVER.migrate,
    configuration.SERVER.logs.level,
)
# What decides whether the receiver channel may carry the token: TLS, or the explicit opt-in.
RECEIVER_CHANNEL_SETTINGS = (
    configuration.RECEIVER_TARGET,
    configuration.RECEIVER_CA_FILE,
    configuration.RECEIVER_INSECURE_CLEARTEXT_TOKEN,
)

# Agent Framework logs every restore, superstep and graph validation at INFO: about ten
# records per Approve, each formatted as JSON and written to stderr. The orchestrator logs
# what an operator needs (operation, case, principal, outcome) itself, so the framework is
# heard from at WARNING and above unless the orchestrator runs at debug.
FRAMEWORK_LOGGER = "agent_framework"


def _largest_content() -> tuple[list[common_pb2.Evidence], common_pb2.Policy]:
    """Return the evidence and policy of a proposal at every bound docs/security.md lists."""
    evidence = [
        common_pb2.Evidence(source_id=f"{i:0128d}", version=MAX_INT, quotation="q" * MAX_QUOTATION_BYTES)
        for i in range(MAX_EVIDENCE)
    ]
    rules = {f"{i:064d}": "v" * 1024 for i in range(MAX_RULES)}
    policy = common_pb2.Policy(name="n" * 128, version_label="l" * 64, allowance_units=MAX_INT, rules=rules)
    return evidence, policy


def receive_limits() -> ReceiveLimits:
    """Return each method's receive limit: its largest valid request, and 4 KiB to spare."""
    evidence, policy = _largest_content()
    start = review_pb2.StartReviewRequest(
        case_id="c" * 64, action="x" * 64, body="b" * MAX_BODY_BYTES, evidence=evidence, policy=policy
    )
    edit = review_pb2.EditProposalRequest(
        expected_operation_id="op-v1-" + "0" * 64, body="b" * MAX_BODY_BYTES, evidence=evidence, policy=policy
    )
    review = "/" + review_pb2.DESCRIPTOR.services_by_name["ReviewService"].full_name + "/"
    operations = "/" + operations_pb2.DESCRIPTOR.services_by_name["OperationsService"].full_name + "/"
    spare = 4 * 1024
    return ReceiveLimits(
        {
            review + "StartReview": start.ByteSize() + spare,
            review + "EditProposal": edit.ByteSize() + spare,
            # A settlement's error text is cut to 2,000 characters rather than refused for its length,
            # so a settlement has no tighter bound than the message limit every client keeps to.
            operations + "SettleOperation": MAX_MESSAGE_BYTES,
            operations + "BatchSettleOperations": MAX_MESSAGE_BYTES,
        }
    )


RECEIVE_LIMITS = receive_limits()


def configure_logging(level: str) -> None:
    """Send JSON logs to stderr at level; the framework's step-by-step INFO records only at debug."""
    logs.configure(level)
    if level != "debug":
        logging.getLogger(FRAMEWORK_LOGGER).setLevel(logging.WARNING)


def utc_now() -> datetime:
    """Return the current time in UTC."""
    return datetime.now(UTC)


def attempt_budget(seconds: float) -> AttemptBudget:
    """Return the attempt budget of this process: its leases taken under its name (orchestrator.holders),
    and the leases of this host's ended processes taken over at once."""
    me = LeaseHolder.this_process()
    if me is None:  # no /proc: a random instance tag, and no holder is known to have ended
        return AttemptBudget(seconds, f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}")
    return AttemptBudget(seconds, me.name, me.has_ended)


def check_receiver_channel(config: OrchestratorConfig) -> None:
    """Raise a configuration StartupError when the receiver's CA file is unusable, or when the receiver
    token would travel in cleartext beyond loopback without the explicit opt-in."""
    startup.check_ca_file(config.receiver_ca_file, configuration.RECEIVER_CA_FILE)
    with startup.refusing_cleartext(RECEIVER_CHANNEL_SETTINGS):
        check_cleartext_token(
            config.receiver_target,
            ca_file=config.receiver_ca_file,
            token=config.receiver_token,
            allow_cleartext_token=config.receiver_allow_cleartext_token,
        )


def connect_receiver(host: Host, config: OrchestratorConfig) -> ReceiverEffects:
    """Open the channel to the receiver, closed when host stops."""
    receiver = ReceiverEffects.connect(
        config.receiver_target,
        token=config.receiver_token,
        timeout=config.receiver_timeout_seconds,
        ca_file=config.receiver_ca_file,
        allow_cleartext_token=config.receiver_allow_cleartext_token,
    )
    host.close_on_stop(receiver.close)
    return receiver


def register(
    review: ReviewServicer, operations: OperationsServicer, audit: AuditServicer, events: EventServicer
) -> Callable[[grpc.aio.Server], list[str]]:
    """Return what adds ReviewService, OperationsService, AuditService and EventService to a server and names
    them."""

    def add(server: grpc.aio.Server) -> list[str]:
        review_pb2_grpc.add_ReviewServiceServicer_to_server(review, server)
        operations_pb2_grpc.add_OperationsServiceServicer_to_server(operations, server)
        audit_pb2_grpc.add_AuditServiceServicer_to_server(audit, server)
        events_pb2_grpc.add_EventServiceServicer_to_server(events, server)
        return [
            review_pb2.DESCRIPTOR.services_by_name["ReviewService"].full_name,
            operations_pb2.DESCRIPTOR.services_by_name["OperationsService"].full_name,
            audit_pb2.DESCRIPTOR.services_by_name["AuditService"].full_name,
            events_pb2.DESCRIPTOR.services_by_name["EventService"].full_name,
        ]

    return add


async def create_server(
    config: OrchestratorConfig,
    *,
    workflow: ReviewWorkflow | None = None,
    effects: EffectPort | None = None,
    clock: Callable[[], datetime] = utc_now,
    monotonic: Callable[[], float] = time.monotonic,
    audit_log: AuditLogReader | None = None,
) -> Host:
    """Migrate the database and serve ReviewService, OperationsService and AuditService (over the store's
    audit log) on config.address (the steps of decisionflow_server.runtime.host);
    workflow, effects and audit_log replace the real ones, monotonic the clock the author budgets
    refill by (tests). A setting that stops it (a review rules file with a problem among them), or a database
    or port that is not ready, raises StartupError naming the setting; listening beyond loopback without TLS
    and authentication raises ExposureRefused."""
    published = None if config.audit_publish_dir is None else CheckpointDirectory(config.audit_publish_dir)
    metrics = OrchestratorMetrics(published=published)

    rules = RulesInForce()

    def check() -> None:
        nonlocal rules
        if effects is None:
            check_receiver_channel(config)
        rules = RulesInForce.at_start(config.review_rules_file)

    async def build(host: Host, engine: Engine) -> Wiring:
        store = OrchestratorStore(engine, on_checkpoints_written=metrics.checkpoint_bytes.inc)
        sealer = CheckpointSealer(config.checkpoint_keys)
        with migrating.opening_database(configuration.DATABASE_URL):
            warn_unreadable_checkpoints(await asyncio.to_thread(check_checkpoint_keys, store, sealer))
        receiver = connect_receiver(host, config) if effects is None else effects
        metrics.watch(store.tally, clock)
        metrics.watch_audit(store.audit_status, clock, signing=config.audit_signer is not None)
        service = OrchestratorService(
            store,
            workflow or ReviewWorkflow(),
            sealer,
            metrics.timed(receiver),
            Failpoints(config.failpoints, FAILPOINTS),
            clock,
            four_eyes=config.four_eyes,
            rules=rules,
            attempt_budget=attempt_budget(config.receiver_timeout_seconds),
            author_budgets=AuthorBudgets(config.author_limits, monotonic=monotonic),
            on_budget_refused=metrics.count_quota_refusal,
        )
        reader: AuditLogReader = store if audit_log is None else audit_log
        audit = AuditServicer(AuditLog(reader))
        sequencer = audit_job(
            store,
            config.audit_signer,
            config.audit_interval_seconds,
            clock,
            directory=published,
            on_refused=metrics.audit_signing_refused.set,
            metrics=metrics.periodic,
        )
        timer = review_timer_job(
            store,
            engine,
            clock,
            interval=config.review_timer_interval_seconds,
            batch=config.review_timer_batch_size,
            on_run=lambda run: metrics.record_review_timer(
                len(run.escalated), len(run.expired), run.overdue, run.oldest_overdue_seconds
            ),
            metrics=metrics.periodic,
        )
        feed = EventFeed(store, config.events, clock, on_streams=metrics.event_streams.set)
        events = EventServicer(Watching(feed, store, clock), config.events.stall_seconds)
        return Wiring(
            register(ReviewServicer(service), OperationsServicer(service, clock), audit, events),
            jobs=tuple(job for job in (sequencer, timer, feed) if job is not None),
            reload=() if config.review_rules_file is None else (rules.reload,),
        )

    return await Host.start(SERVICE, config, metrics, build, check=check)


SERVICE: Service[OrchestratorConfig] = Service(
    name="orchestrator",
    program=PROGRAM,
    logger=logger,
    schema=SCHEMA,
    address=configuration.SERVER.address,
    status_table=STATUS_TABLE,
    receive=RECEIVE_LIMITS,
    create=create_server,
    configure_logging=configure_logging,
    without_tracing=without_framework_spans,
)


def load(args: list[str]) -> OrchestratorConfig:
    """Return the serving configuration from the command line and the environment (a bad value exits 2)."""
    cli = arguments.ArgumentParser(
        prog="decisionflow-orchestrator",
        description="Orchestrator: proposals, reviews and decisions; writes each approved effect once. "
        "Schema: decisionflow-orchestrator migrate --help. "
        "Housekeeping: decisionflow-orchestrator {prune-checkpoints,expire-reviews,reopen-reviews} --help. "
        "Audit log: decisionflow-orchestrator {audit-checkpoint,audit-keygen} --help",
    )
    configuration.add_to(cli)
    add_version_flag(cli)
    return configuration.from_namespace(cli, cli.parse_args(args), os.environ)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the decisionflow-orchestrator command (``serve``, the default, ``migrate``, ``prune-checkpoints``,
    ``expire-reviews``, ``reopen-reviews``, ``audit-checkpoint`` or ``audit-keygen``); returns the process exit
    status."""
    commands: dict[str, Command] = housekeeping_commands.commands(SCHEMA, configure_logging)
    commands.update(audit_commands.commands(SCHEMA))
    return command_line(SERVICE, sys.argv[1:] if argv is None else argv, os.environ, load, commands)


if __name__ == "__main__":
    sys.exit(main())
