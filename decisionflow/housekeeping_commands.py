"""The shape every housekeeping command shares (``decisionflow-orchestrator prune-checkpoints``,
``decisionflow-receiver prune-keys``): a parser with the service's settings and ``--dry-run``, the
migrated database it works on, and its report: one JSON line on stdout for scripts, one line for a
person on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.engine import Engine

from decisionflow import startup
from decisionflow.settings import Setting, add_settings


def parser(program: str, command: str, description: str, settings: Sequence[Setting[Any]]) -> argparse.ArgumentParser:
    """Return the parser of ``program command``: the given settings (flag and environment) and --dry-run."""
    cli = argparse.ArgumentParser(prog=f"{program} {command}", description=description)
    add_settings(cli, settings)
    cli.add_argument("--dry-run", action="store_true", help="report what would change, change nothing")
    return cli


def migrated_engine(url: str, setting: Setting[Any], migrate: Callable[[Engine], None]) -> Engine:
    """Return an engine on the migrated database at url; a bad URL or a database that fails raises
    StartupError naming setting (and the engine is released)."""
    engine = startup.database_engine(url, setting)
    try:
        with startup.opening_database(setting):
            migrate(engine)
    except BaseException:
        engine.dispose()
        raise
    return engine


def report_count(command: str, *, dry_run: bool, noun: str, count: int, what: str) -> None:
    """Print ``{"command", "dry_run", noun: count}`` on stdout and "deleted|would delete <count> <what>" on stderr."""
    print(json.dumps({"command": command, "dry_run": dry_run, noun: count}))
    print(f"{'would delete' if dry_run else 'deleted'} {count} {what}", file=sys.stderr)
