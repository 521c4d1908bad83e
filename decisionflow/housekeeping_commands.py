"""The shape every housekeeping command shares (``decisionflow-orchestrator prune-checkpoints``,
``decisionflow-receiver prune-keys``): a parser with the service's settings and ``--dry-run``, and
its report: one JSON line on stdout for scripts, one line for a
person on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from decisionflow import arguments
from decisionflow.settings import Setting, add_settings


def parser(program: str, command: str, description: str, settings: Sequence[Setting[Any]]) -> argparse.ArgumentParser:
    """Return the parser of ``program command``: the given settings (flag and environment) and --dry-run."""
    cli = arguments.ArgumentParser(prog=f"{program} {command}", description=description)
    add_settings(cli, settings)
    cli.add_argument("--dry-run", action="store_true", help="report what would change, change nothing")
    return cli


def report_count(command: str, *, dry_run: bool, noun: str, count: int, what: str) -> None:
    """Print ``{"command", "dry_run", noun: count}`` on stdout and "deleted|would delete <count> <what>" on stderr."""
    print(json.dumps({"command": command, "dry_run": dry_run, noun: count}))
    print(f"{'would delete' if dry_run else 'deleted'} {count} {what}", file=sys.stderr)
