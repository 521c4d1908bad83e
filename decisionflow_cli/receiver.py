"""``decisionflow receiver lookup OPERATION_ID``: ask the EffectReceiver whether an operation's effect
exists (its Lookup; role effect_reader), and print what ``decisionflow ops settle`` records.

Prints the answer on stdout (one JSON object with ``--json``) and, on stderr, the ``ops settle``
command that records it at the orchestrator. Exit 0 for an answer, APPLIED or NOT_FOUND alike (a
read); 3 refused (invalid id, permission denied, unauthenticated); 1 error (unavailable after
retries, deadline); 2 bad usage. See docs/operations.md.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from decisionflow.client import Consistency, DecisionflowError, LookupAnswer, LookupStatus, ReceiverClient
from decisionflow_cli.command import Subparsers
from decisionflow_cli.review._connection import TIMEOUT, TOKEN_FILE, connection
from decisionflow_cli.review._output import EXIT_DONE, emit, failed, say
from decisionflow_server.foundation import settings
from decisionflow_server.foundation.settings import Setting, add_settings

__all__ = ["register"]

# The keys of the review commands' connection settings, declared for the receiver: its own target, CA
# and cleartext variables (the ones the orchestrator and the reconciler read) and help that names it.
TARGET = settings.receiver_target_setting("target")
CA_FILE, INSECURE_CLEARTEXT_TOKEN = settings.receiver_tls_settings()
CONNECTION_SETTINGS: tuple[Setting[Any], ...] = (TARGET, TOKEN_FILE, TIMEOUT, CA_FILE, INSECURE_CLEARTEXT_TOKEN)

EXIT_CODES_HELP = (
    "exit status: 0 an answer (APPLIED or NOT_FOUND); 3 refused (invalid id, permission denied, "
    "unauthenticated); 1 error (unavailable after retries, deadline); 2 bad usage. See docs/operations.md"
)


def register(subparsers: Subparsers) -> None:
    """Add ``receiver`` with its subcommand ``lookup``."""
    receiver = subparsers.add_parser(
        "receiver",
        help="ask the EffectReceiver (role effect_reader)",
        description="Read-only commands against the EffectReceiver (role effect_reader). See docs/operations.md.",
        epilog=EXIT_CODES_HELP,
    )
    commands = receiver.add_subparsers(dest="receiver_command", metavar="RECEIVER_COMMAND", required=True)
    lookup = commands.add_parser(
        "lookup",
        help="whether the effect of an operation exists: APPLIED with its receipt, or NOT_FOUND",
        description="Ask the receiver's Lookup whether the effect of OPERATION_ID exists, how fresh the answer "
        "is, and print the `decisionflow ops settle` command that records it.",
        epilog=EXIT_CODES_HELP,
    )
    lookup.add_argument("operation_id", metavar="OPERATION_ID")
    add_settings(lookup, CONNECTION_SETTINGS)
    lookup.add_argument("--json", action="store_true", help="print one JSON object instead of text for people")
    lookup.set_defaults(func=run_lookup)


def settle_command(answer: LookupAnswer) -> list[str]:
    """Return the ``decisionflow ops settle`` arguments that record answer at the orchestrator."""
    argv = ["decisionflow", "ops", "settle", answer.operation_id]
    argv += ["--status", answer.status.value.lower(), "--consistency", answer.consistency.value.lower()]
    if answer.receipt is not None:
        argv += ["--receipt-id", answer.receipt.receipt_id]
        if answer.receipt.applied_at is not None:
            argv += ["--applied-at", answer.receipt.applied_at.isoformat()]
    if answer.observed_at is not None:
        argv += ["--observed-at", answer.observed_at.isoformat()]
    return argv


def describe(answer: LookupAnswer) -> str:
    """Return the answer as one line for people."""
    observed = answer.observed_at.isoformat() if answer.observed_at else "-"
    line = f"{answer.operation_id}: {answer.status.value} ({answer.consistency.value}, observed {observed})"
    if answer.receipt is not None:
        applied = answer.receipt.applied_at.isoformat() if answer.receipt.applied_at else "-"
        line += f", receipt {answer.receipt.receipt_id} applied {applied}"
    return line


def run_lookup(args: argparse.Namespace) -> int:
    """Print the receiver's answer for one operation id; a read, so exit 0 whatever it is."""
    with connection(args, CONNECTION_SETTINGS) as open_connection:
        client = ReceiverClient(open_connection.channel, timeout=open_connection.timeout, policy=open_connection.policy)
        try:
            answer = client.lookup(args.operation_id)
        except DecisionflowError as error:
            raise failed("receiver lookup", error, args.operation_id, print_json=False) from error
    if args.json:
        emit(
            {
                "operation_id": answer.operation_id,
                "status": answer.status,
                "consistency": answer.consistency,
                "observed_at": answer.observed_at,
                "receipt": answer.receipt,
            }
        )
    else:
        sys.stdout.write(describe(answer) + "\n")
        sys.stdout.flush()
    authoritative = answer.status is LookupStatus.APPLIED or answer.consistency is Consistency.STRONG
    note = "" if authoritative else " (an eventual NOT_FOUND may lag: look again at the primary before a re-drive)"
    say(f"record it at the orchestrator: {shlex.join(settle_command(answer))}{note}")
    return EXIT_DONE
