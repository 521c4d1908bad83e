"""``decisionflow start|show|edit|approve|decline|status|pending|whoami``: the review commands against an
orchestrator.

Each command prints one JSON object on stdout (the operation id, its state, and for a decision
the outcome, replay flag and receipt; for a failure the error's code, reason and metadata) and
one short human line on stderr; ``pending`` prints the inbox as a table (or, with ``--json``, one
JSON object per pending review per line). Transient failures are retried inside ``ReviewClient``; the
whole command, retries included, ends within ``--timeout`` seconds.

Exit status:
  0   done: a read, a started or edited proposal, or a decision whose outcome is COMMITTED or DECLINED, or
      a vote the review's rule counts while it needs more (AWAITING_APPROVALS: where it stands on stderr)
  42  the decision is recorded but the effect's outcome is Unknown (decisionflow-reconciler settles it;
      approving again with the same operation id is also safe)
  3   refused, nothing changed: stale proposal, conflicting decision, invalid request, not found,
      permission denied, a vote the review's rule does not count (NOT_ELIGIBLE_TO_DECIDE), unauthenticated,
      or the effect rejected by the receiver
  1   error: unavailable after retries, deadline exceeded, internal error; the call may have acted,
      so repeat the same command or check with ``decisionflow status``
  2   bad usage or unreadable input
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from decisionflow_cli.command import CommandParser, Subparsers, positive_count
from decisionflow_cli.review._commands import (
    edit_from_json,
    run_approve,
    run_decline,
    run_edit,
    run_show,
    run_start,
    run_status,
    run_whoami,
)
from decisionflow_cli.review._connection import CONNECTION_SETTINGS
from decisionflow_cli.review._output import (
    EXIT_CODES_HELP,
    EXIT_DONE,
    EXIT_ERROR,
    EXIT_REFUSED,
    EXIT_UNKNOWN,
)
from decisionflow_cli.review._pending import run_pending
from decisionflow_server.foundation.settings import add_settings

__all__ = ["EXIT_DONE", "EXIT_ERROR", "EXIT_REFUSED", "EXIT_UNKNOWN", "edit_from_json", "register"]


def register(subparsers: Subparsers) -> None:
    """Add ``start``, ``show``, ``edit``, ``approve``, ``decline``, ``status``, ``pending`` and ``whoami``."""
    connection = CommandParser(add_help=False)
    add_settings(connection, CONNECTION_SETTINGS)

    def command(
        name: str, summary: str, description: str, handler: Callable[[argparse.Namespace], int]
    ) -> CommandParser:
        parser = subparsers.add_parser(
            name, help=summary, description=description, epilog=EXIT_CODES_HELP, parents=[connection]
        )
        parser.set_defaults(func=handler)
        if name != "pending":
            # These commands always answer one JSON object on stdout; the flag is taken as ops and receiver take it.
            parser.add_argument(
                "--json", action="store_true", help="print one JSON object on stdout (these commands always do)"
            )
        return parser

    start = command(
        "start",
        "start a review of a proposal",
        "Record a proposal {case_id, action, body, evidence: [{source_id, version, quotation}], policy: {name, "
        "version_label, allowance_units, rules}} and open its pending review (role author). Starting the same "
        "content again returns the same operation. While the case's current proposal is undecided, other "
        "content is refused (CASE_HAS_OPEN_PROPOSAL, naming it) unless --expected-operation-id names it.",
        run_start,
    )
    start.add_argument("file", metavar="FILE", help="proposal JSON file, - for standard input")
    start.add_argument(
        "--expected-operation-id",
        metavar="OPERATION_ID",
        help="replace the case's current, undecided proposal OPERATION_ID (refused as stale if it is not current)",
    )

    show = command(
        "show",
        "show a proposal and its operation",
        "Print a proposal, by operation id or as the current proposal of a case, with its operation's state.",
        run_show,
    )
    which = show.add_mutually_exclusive_group(required=True)
    which.add_argument("operation_id", nargs="?", metavar="OPERATION_ID", help="the operation to show")
    which.add_argument("--case", dest="case_id", metavar="CASE_ID", help="show the case's current proposal")

    edit = command(
        "edit",
        "replace a case's current proposal",
        "Replace the case's current proposal with {body, evidence, policy} from FILE (role author); refused as "
        "stale unless EXPECTED_OPERATION_ID is still the current one. The edit is a new operation.",
        run_edit,
    )
    edit.add_argument("expected_operation_id", metavar="EXPECTED_OPERATION_ID", help="the proposal being edited")
    edit.add_argument("file", metavar="FILE", help="JSON {body, evidence, policy}, - for standard input")

    for name, verb in (("approve", "approve"), ("decline", "decline")):
        decide = command(
            name,
            f"{verb} an operation",
            f"Record the decision {name.upper()} on exactly OPERATION_ID as the authenticated reviewer (role "
            "reviewer). Repeating the same decision is a replay; the other decision is refused as a conflict.",
            run_approve if name == "approve" else run_decline,
        )
        decide.add_argument("operation_id", metavar="OPERATION_ID")

    status = command("status", "show where an operation stands", "Print one operation's state.", run_status)
    status.add_argument("operation_id", metavar="OPERATION_ID")

    pending = command(
        "pending",
        "list the pending reviews, oldest first",
        "Print every case's current proposal still waiting for a decision (roles reviewer, author or operator), "
        "oldest first: operation id, case, author, how many versions its chain of edits holds, age and action. "
        "Filters that are given must all match.",
        run_pending,
    )
    which_cases = pending.add_mutually_exclusive_group()
    which_cases.add_argument("--case", dest="case_id", metavar="CASE_ID", help="only this case")
    which_cases.add_argument(
        "--case-prefix", metavar="PREFIX", help="only cases whose id starts with PREFIX (exactly, case matters)"
    )
    pending.add_argument("--author", metavar="PRINCIPAL", help="only proposals created by PRINCIPAL")
    pending.add_argument("--action", metavar="ACTION", help="only proposals of this action")
    pending.add_argument("--limit", type=positive_count, metavar="N", help="print at most N pending reviews")
    pending.add_argument("--json", action="store_true", help="print one JSON object per pending review per line")

    command(
        "whoami",
        "show who the orchestrator takes you to be",
        "Print the principal the orchestrator authenticates these credentials as, with the roles granted to it "
        "and the groups it belongs to, which review rules name (any of the roles reviewer, author, operator or "
        "auditor may ask).",
        run_whoami,
    )
