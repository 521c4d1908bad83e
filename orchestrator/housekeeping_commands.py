"""The operators' housekeeping commands of ``decisionflow-orchestrator``: ``prune-checkpoints``,
``expire-reviews``, ``reopen-reviews`` and ``reroute-reviews`` (what each does: orchestrator.housekeeping).
Each has the shape every housekeeping command shares (decisionflow_server.runtime.housekeeping_commands): the service's
database settings, ``--dry-run``, the existing database, one JSON line on stdout and one line for a person
on stderr."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import math
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from decisionflow_server.foundation import settings, startup_errors
from decisionflow_server.foundation.settings import Setting, SettingError, add_settings, parse_settings
from decisionflow_server.foundation.startup_errors import StartupError
from decisionflow_server.runtime import housekeeping_commands
from decisionflow_server.runtime.host import Command
from decisionflow_server.storage import migrating
from orchestrator import config as configuration
from orchestrator.checkpoints import CheckpointSealer
from orchestrator.domain import SUPPORTED_ACTIONS
from orchestrator.housekeeping import expire_reviews, prune_checkpoints, reopen_reviews, reroute_reviews
from orchestrator.rules_in_force import RulesInForce
from orchestrator.store import OrchestratorStore, RerouteOutcome, target_digest
from orchestrator.workflow import ReviewWorkflow

logger = logging.getLogger("decisionflow.orchestrator")

# The housekeeping commands read these, with the same parsers as the server.
HOUSEKEEPING_SETTINGS: tuple[Setting[Any], ...] = (
    configuration.DATABASE_URL,
    configuration.SERVER.database_url_file,
    configuration.CHECKPOINT_KEYS,
    configuration.CHECKPOINT_KEYS_FILE,
    configuration.SERVER.logs.level,
)
# A hundred years: beyond it, now minus the retention falls outside the dates the database holds.
MAX_RETENTION_DAYS = 36_525


def _retention_days(value: str) -> float:
    """Return a finite number of days from 0 to MAX_RETENTION_DAYS (argparse reports the refusal)."""
    try:
        days = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, not {value!r}") from None
    if not (math.isfinite(days) and 0 <= days <= MAX_RETENTION_DAYS):
        raise argparse.ArgumentTypeError(f"expected 0 to {MAX_RETENTION_DAYS} days, not {value!r}")
    return days


def _housekeeping(
    schema: migrating.Schema, configure_logging: Callable[[str], None], command: str, args: list[str]
) -> int:
    cli = housekeeping_commands.parser(schema.program, command, HOUSEKEEPING[command], HOUSEKEEPING_SETTINGS)
    if command == "prune-checkpoints":
        cli.add_argument(
            "--older-than-days",
            type=_retention_days,
            required=True,
            help=f"retention of settled operations' checkpoints (0 to {MAX_RETENTION_DAYS} days)",
        )
    if command == "expire-reviews":
        cli.add_argument(
            "--older-than",
            required=True,
            metavar="DURATION",
            help="expire undecided proposals whose case has not moved for this long: seconds, or a number with "
            "s, m, h or d (for example 30d), at most 100 years",
        )
    if command == "reroute-reviews":
        cli.add_argument(
            "--action", required=True, choices=sorted(SUPPORTED_ACTIONS), help="the action whose reviews to re-route"
        )
        add_settings(cli, (configuration.REVIEW_RULES_FILE,))
    ns = cli.parse_args(args)
    try:
        older_than = settings.age(ns.older_than) if command == "expire-reviews" else None
    except ValueError as error:
        cli.error(f"--older-than: {error}")
    try:
        values = parse_settings(ns, HOUSEKEEPING_SETTINGS, os.environ)
        # Only re-opening reads checkpoints, so only it needs the keys; given keys are checked either way.
        pick_keys = values.required_one_of if command == "reopen-reviews" else values.one_of
        keys = pick_keys(configuration.CHECKPOINT_KEYS, configuration.CHECKPOINT_KEYS_FILE) or ()
        database_url = values.required_one_of(configuration.DATABASE_URL, configuration.SERVER.database_url_file)
        # Required: without a file every review of the action would be moved to the default rule.
        rules_path = (
            parse_settings(ns, (configuration.REVIEW_RULES_FILE,), os.environ).required(configuration.REVIEW_RULES_FILE)
            if command == "reroute-reviews"
            else None
        )
    except SettingError as error:
        cli.error(str(error))
    level = values.required(configuration.SERVER.logs.level)
    configure_logging(level)
    if rules_path is not None:
        return _reroute(schema, ns, database_url, rules_path, level)

    def work(engine: Engine) -> int:
        store = OrchestratorStore(engine)
        if command == "prune-checkpoints":
            pruned = prune_checkpoints(store, timedelta(days=ns.older_than_days), datetime.now(UTC), dry_run=ns.dry_run)
            what = f"checkpoints of operations settled more than {ns.older_than_days:g} days ago"
            housekeeping_commands.report_count(command, dry_run=ns.dry_run, noun="checkpoints", count=pruned, what=what)
            return 0
        if older_than is not None:
            expired = expire_reviews(store, older_than, datetime.now(UTC), dry_run=ns.dry_run)
            what = f"undecided reviews whose case has not moved for {ns.older_than.strip()}"
            housekeeping_commands.report_count(
                command, dry_run=ns.dry_run, noun="reviews", count=expired, what=what, verb="expire"
            )
            return 0
        report = asyncio.run(
            reopen_reviews(store, ReviewWorkflow(), CheckpointSealer(keys), _utc_now, dry_run=ns.dry_run)
        )
        found = [
            {"operation_id": r.operation_id, "workflow": f"{r.workflow_name}@{r.workflow_version}"}
            for r in report.found
        ]
        print(
            json.dumps(
                {
                    "command": command,
                    "dry_run": ns.dry_run,
                    "found": found,
                    "reopened": report.reopened,
                    "skipped": report.skipped,
                }
            )
        )
        return 0

    return housekeeping_commands.on_existing_database(
        schema, command, database_url, work, logger, debug=level == "debug"
    )


def _reroute(schema: migrating.Schema, ns: argparse.Namespace, database_url: str, rules_path: Path, level: str) -> int:
    """reroute-reviews: the rule the file gives the action, read as the server reads it at start-up (a file with a
    problem names each as FILE:LINE and changes nothing)."""
    command = "reroute-reviews"
    try:
        rule = RulesInForce.at_start(rules_path).rule_for(ns.action)
    except StartupError as error:
        return startup_errors.report(
            f"{schema.program} {command}", error, logger, debug=level == "debug", service=schema.service
        )

    def progress(visited: int) -> None:
        print(f"{command}: {visited} reviews of {ns.action} looked at", file=sys.stderr, flush=True)

    def work(engine: Engine) -> int:
        visits = reroute_reviews(OrchestratorStore(engine), rule, _utc_now, dry_run=ns.dry_run, progress=progress)
        moved = [v.operation_id for v in visits if v.outcome is RerouteOutcome.REROUTED]
        kept = [{"operation_id": v.operation_id, "why": v.outcome.value} for v in visits if v.outcome in KEPT]
        digest = target_digest(rule)
        print(
            json.dumps(
                {
                    "command": command,
                    "dry_run": ns.dry_run,
                    "action": ns.action,
                    "rule_digest": digest,
                    "rerouted": moved,
                    "kept": kept,
                }
            )
        )
        to = "the default rule" if digest is None else f"rule {digest}"
        verb = "would re-route" if ns.dry_run else "re-routed"
        print(
            f"{verb} {len(moved)} pending reviews of {ns.action} to {to}; kept {len(kept)} on their rule "
            "(a vote or an escalation recorded)",
            file=sys.stderr,
        )
        return 0

    return housekeeping_commands.on_existing_database(
        schema, command, database_url, work, logger, debug=level == "debug"
    )


# A review on which something was decided keeps its rule (orchestrator.store._reroute).
KEPT = (RerouteOutcome.KEPT_VOTES_CAST, RerouteOutcome.KEPT_ESCALATED)

HOUSEKEEPING = {
    "prune-checkpoints": "delete checkpoints of operations settled before a retention, and of undecided "
    "proposals superseded on a case unchanged for as long; proposals, decisions and receipts are kept forever; "
    "a case's current pending review is never touched",
    "expire-reviews": "move undecided proposals whose case has not moved for a while to EXPIRED: they leave the "
    "reviewers' inbox and their authors' open reviews, and can no longer be decided (an edit starts a new review); "
    "proposals, decisions and receipts are kept",
    "reopen-reviews": "re-open pending reviews recorded under another workflow graph under the running one "
    "(same operation id; the old checkpoint is retired, never resumed)",
    "reroute-reviews": "move the pending reviews of an action that follow another rule to the rule the review rules "
    "file gives it, each with its reroute leaf in the audit log; a review with a vote or an escalation recorded "
    "keeps its rule (docs/review-rules.md#re-routing)",
}


def _utc_now() -> datetime:
    return datetime.now(UTC)


def commands(schema: migrating.Schema, configure_logging: Callable[[str], None]) -> dict[str, Command]:
    """Return each housekeeping command by its word, run against the database schema names, with logs set up
    by configure_logging (the server's own)."""
    return {command: functools.partial(_housekeeping, schema, configure_logging, command) for command in HOUSEKEEPING}
