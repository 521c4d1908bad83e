"""The shape every housekeeping command shares (``decisionflow-orchestrator prune-checkpoints`` and
``expire-reviews``, ``decisionflow-receiver prune-keys``): a parser with the service's settings and ``--dry-run``, the
existing database (never created or migrated: a mistyped path must not become an empty one), and
its report: one JSON line on stdout for scripts, one line for a person on stderr."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.engine import Engine

from decisionflow_server.foundation import arguments, startup_errors
from decisionflow_server.foundation.settings import Setting, add_settings
from decisionflow_server.foundation.startup_errors import StartupError
from decisionflow_server.storage import migrating


def parser(program: str, command: str, description: str, settings: Sequence[Setting[Any]]) -> argparse.ArgumentParser:
    """Return the parser of ``program command``: the given settings (flag and environment) and --dry-run."""
    cli = arguments.ArgumentParser(prog=f"{program} {command}", description=description)
    add_settings(cli, settings)
    cli.add_argument("--dry-run", action="store_true", help="report what would change, change nothing")
    return cli


def report_count(command: str, *, dry_run: bool, noun: str, count: int, what: str, verb: str = "delete") -> None:
    """Print ``{"command", "dry_run", noun: count}`` on stdout and "<verb>d|would <verb> <count> <what>" on
    stderr ("deleted 3 …", "would expire 3 …")."""
    print(json.dumps({"command": command, "dry_run": dry_run, noun: count}))
    print(f"{'would ' + verb if dry_run else verb + 'd'} {count} {what}", file=sys.stderr)


def on_existing_database(
    schema: migrating.Schema,
    command: str,
    database_url: str,
    work: Callable[[Engine], int],
    logger: logging.Logger,
    *,
    debug: bool,
) -> int:
    """Run work on the database at database_url, at the head revision, and return its exit status; a missing
    database, an older schema or an unreachable one is one line naming the setting
    (decisionflow_server.foundation.startup_errors)."""
    try:
        engine = migrating.open_existing(database_url, schema)
    except StartupError as error:
        return startup_errors.report(f"{schema.program} {command}", error, logger, debug=debug, service=schema.service)
    try:
        return work(engine)
    finally:
        engine.dispose()
