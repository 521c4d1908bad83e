"""``decisionflow ops list|describe|redrive|settle``: find, inspect and settle operations (role operator).

``list`` and ``describe`` print a table or a field list for people on stdout; with ``--json``,
``list`` prints one JSON object per operation per line (JSON Lines, oldest first) and the other
commands one JSON object. A one-line summary or failure goes to stderr. Transient failures are
retried inside the client; the whole command ends within ``--timeout`` seconds. See docs/operations.md.

Exit status (as for the review commands):
  0   done: a read, a recorded lookup, or a re-drive whose outcome is COMMITTED
  42  re-drive outcome Unknown: the receiver's answer did not arrive; the operation stays UNKNOWN
  4   escalate: the receiver refused the re-drive (KEY_RETENTION_EXCEEDED, the first attempt is beyond
      its key retention); nothing written, the operation stays UNKNOWN and must never be re-driven
  3   refused, nothing changed: not found, not re-drivable, invalid request, permission denied,
      unauthenticated, or the effect rejected by the receiver
  1   error: unavailable after retries, deadline exceeded, internal error
  2   bad usage or input (unknown state, bad age or time, a settlement the server would refuse)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from decisionflow.client import OperationState
from decisionflow_cli.command import CommandParser, Subparsers, positive_count
from decisionflow_cli.ops import _parsing as parse
from decisionflow_cli.ops._commands import run_describe, run_list, run_redrive, run_settle
from decisionflow_cli.review._connection import CONNECTION_SETTINGS
from decisionflow_server.foundation.settings import add_settings

__all__ = ["register"]

EXIT_CODES_HELP = (
    "exit status: 0 done (a read, a recorded lookup, a re-drive that COMMITTED); 42 re-drive outcome Unknown; "
    "4 escalate (the receiver refused the re-drive: first attempt beyond its key retention); 3 refused (not "
    "found, not re-drivable, invalid request, permission denied, unauthenticated, rejected by the receiver); "
    "1 error (unavailable after retries, deadline, internal); 2 bad usage or input. "
    "See docs/operations.md"
)


def _split_states(text: str) -> list[OperationState]:
    return [parse.state(name) for name in text.split(",") if name.strip()] or [parse.state(text)]


def register(subparsers: Subparsers) -> None:
    """Add ``ops`` with its subcommands ``list``, ``describe``, ``redrive`` and ``settle``."""
    ops = subparsers.add_parser(
        "ops",
        help="find, describe, re-drive and settle operations (operator)",
        description="Operator commands over the orchestrator's OperationsService (role operator). "
        "See docs/operations.md.",
        epilog=EXIT_CODES_HELP,
    )
    commands = ops.add_subparsers(dest="ops_command", metavar="OPS_COMMAND", required=True)
    connection = CommandParser(add_help=False)
    add_settings(connection, CONNECTION_SETTINGS)
    connection.add_argument("--json", action="store_true", help="print JSON instead of text for people")

    def command(name: str, summary: str, handler: Callable[[argparse.Namespace], int]) -> CommandParser:
        parser = commands.add_parser(
            name,
            help=summary,
            description=summary[0].upper() + summary[1:] + ".",
            epilog=EXIT_CODES_HELP,
            parents=[connection],
        )
        parser.set_defaults(func=handler)
        return parser

    listing = command(
        "list", "list operations by state, age and case, oldest first (default: APPROVED and UNKNOWN)", run_list
    )
    listing.add_argument(
        "--state",
        dest="states",
        action="append",
        type=_split_states,
        metavar="STATE",
        help="pending_review, approved, unknown, committed, declined, rejected, superseded or expired (any case); "
        "repeat or separate with commas",
    )
    listing.add_argument(
        "--older-than",
        type=parse.age,
        metavar="AGE",
        help="only operations that entered their state at least AGE ago: seconds, or 30s, 5m, 2h, 1d",
    )
    listing.add_argument("--case", dest="case_id", metavar="CASE_ID", help="only the operations of this case")
    listing.add_argument("--limit", type=positive_count, metavar="N", help="print at most N operations")

    describe = command("describe", "print every field of one operation", run_describe)
    describe.add_argument("operation_id", metavar="OPERATION_ID")

    redrive = command(
        "redrive",
        "call Apply again for an APPROVED or UNKNOWN operation, with the same key and stored payload",
        run_redrive,
    )
    redrive.add_argument("operation_id", metavar="OPERATION_ID")

    settle = command(
        "settle",
        "record a lookup made at the receiver: applied with its receipt commits an open operation, not_found is noted",
        run_settle,
    )
    settle.add_argument("operation_id", metavar="OPERATION_ID")
    settle.add_argument("--status", type=parse.lookup_status, required=True, help="applied or not_found")
    settle.add_argument(
        "--consistency",
        type=parse.consistency,
        required=True,
        help="strong (the receiver's primary) or eventual (a replica); only a strong not_found is authoritative",
    )
    settle.add_argument("--receipt-id", help="the receipt id the lookup showed (required with --status applied)")
    settle.add_argument(
        "--applied-at", type=parse.instant, metavar="TIME", help="when the receiver applied it (default: --observed-at)"
    )
    settle.add_argument(
        "--observed-at",
        type=parse.instant,
        metavar="TIME",
        help="when the lookup was made, ISO 8601 with offset (default: now)",
    )
