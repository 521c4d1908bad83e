"""The handlers of ``decisionflow ops``: one call (or one listing) each, printed for people or as JSON."""

from __future__ import annotations

import argparse
import itertools
import sys
from datetime import UTC, datetime, timedelta

from decisionflow.client import (
    DecisionflowError,
    KeyRetentionExceeded,
    LookupStatus,
    OperationsClient,
    Outcome,
    Receipt,
    ReviewClient,
    Settlement,
)
from decisionflow_cli._tables import table
from decisionflow_cli.command import CommandError
from decisionflow_cli.ops import _render as render
from decisionflow_cli.review._connection import Connection, connection
from decisionflow_cli.review._output import (
    EXIT_DONE,
    EXIT_ESCALATE,
    EXIT_REFUSED,
    EXIT_UNKNOWN,
    emit,
    failed,
    say,
)

# Pages are fetched as the listing is printed; a --limit below it asks for no more than needed.
PAGE_SIZE = 500
# A lookup the operator made cannot have happened later than now; a little slack for clock skew.
CLOCK_SKEW = timedelta(minutes=1)


def _now() -> datetime:
    return datetime.now(UTC)


def _operations(open_connection: Connection) -> OperationsClient:
    return OperationsClient(open_connection.channel, timeout=open_connection.timeout, policy=open_connection.policy)


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def run_list(args: argparse.Namespace) -> int:
    """Print the operations in the given states (default APPROVED and UNKNOWN), oldest first; exit 0."""
    states = list(dict.fromkeys(itertools.chain.from_iterable(args.states or [])))
    page_size = min(PAGE_SIZE, args.limit) if args.limit else PAGE_SIZE
    rows: list[tuple[str, ...]] = []
    subject = f"case {args.case_id}" if args.case_id else "operations"
    with connection(args) as open_connection:
        client = OperationsClient(
            open_connection.channel, timeout=open_connection.timeout, policy=open_connection.policy
        )
        listing = client.list_operations(states, min_age=args.older_than, page_size=page_size, case_id=args.case_id)
        try:
            for operation in itertools.islice(listing, args.limit):
                now = _now()
                if args.json:
                    emit(render.as_json(operation, now))
                else:
                    rows.append(render.table_row(operation, now))
        except DecisionflowError as error:
            raise failed("ops list", error, subject, print_json=False) from error
    if not args.json:
        _out(table(rows, render.TABLE_COLUMNS))
        shown = ", ".join(s.value for s in states) if states else "APPROVED, UNKNOWN"
        say(f"{len(rows)} operation(s) in {shown}" + (f" of case {args.case_id}" if args.case_id else ""))
    return EXIT_DONE


def run_describe(args: argparse.Namespace) -> int:
    """Print every field of one operation; a read, so exit 0 whatever its state."""
    with connection(args) as open_connection:
        client = ReviewClient(open_connection.channel, timeout=open_connection.timeout, policy=open_connection.policy)
        try:
            operation = client.get_operation(args.operation_id)
        except DecisionflowError as error:
            raise failed("ops describe", error, args.operation_id, print_json=False) from error
    now = _now()
    if args.json:
        emit(render.as_json(operation, now))
    else:
        _out(render.details(operation, now))
    return EXIT_DONE


def run_redrive(args: argparse.Namespace) -> int:
    """Call Apply again for an APPROVED or UNKNOWN operation; exit 0 committed, 42 still Unknown, 3 refused,
    4 escalate (the receiver refused it: first attempt beyond its key retention)."""
    with connection(args) as open_connection:
        client = OperationsClient(
            open_connection.channel, timeout=open_connection.timeout, policy=open_connection.policy
        )
        try:
            result = client.redrive_operation(args.operation_id)
        except KeyRetentionExceeded as error:
            return _escalate(args, error)
        except DecisionflowError as error:
            raise failed("ops redrive", error, args.operation_id, print_json=False) from error
    operation = result.operation
    if args.json:
        emit({"outcome": result.outcome, "operation": render.as_json(operation, _now())})
    else:
        receipt = f", receipt {operation.receipt_id}" if operation.receipt_id else ""
        _out(f"outcome {result.outcome.value} for {operation.operation_id} (state {operation.state.value}{receipt})")
    if result.outcome is Outcome.UNKNOWN:
        say(
            f"outcome UNKNOWN for {operation.operation_id}: the receiver's answer did not arrive, or it refused the "
            "orchestrator (see the orchestrator's log); re-drive or look it up later"
        )
        return EXIT_UNKNOWN
    if result.outcome is Outcome.REJECTED:
        say(f"outcome REJECTED for {operation.operation_id}: {operation.rejection_reason}")
        return EXIT_REFUSED
    return EXIT_DONE


def _escalate(args: argparse.Namespace, error: KeyRetentionExceeded) -> int:
    """Report a re-drive refused for the receiver's key retention: nothing written, the outcome stays unknown."""
    if args.json:
        emit(
            {
                "outcome": Outcome.UNKNOWN,
                "escalate": True,
                "reason": error.reason,
                "operation_id": args.operation_id,
                "first_attempted_at": error.first_attempted_at,
                "key_retention": error.key_retention,
                "message": error.message,
            }
        )
    else:
        _out(f"outcome {Outcome.UNKNOWN.value} for {args.operation_id}: escalate ({error.reason})")
    say(
        f"escalate {args.operation_id}: the receiver refused the re-drive ({error.reason}): first attempted at "
        f"{error.first_attempted_at or 'an unknown time'}, beyond its key retention of {error.key_retention or '?'}; "
        "it may have written the effect and forgotten the key, so never re-drive it: look the effect up at the "
        "receiver and record what it shows with decisionflow ops settle"
    )
    return EXIT_ESCALATE


def settlement(args: argparse.Namespace, now: datetime) -> Settlement:
    """Return the settlement the flags describe; a combination the server would refuse raises CommandError."""
    if args.status is LookupStatus.APPLIED and not args.receipt_id:
        raise CommandError("--status applied needs --receipt-id (the receipt the receiver's lookup showed)")
    if args.status is LookupStatus.NOT_FOUND and (args.receipt_id or args.applied_at):
        raise CommandError("--status not_found takes no --receipt-id or --applied-at: nothing was applied")
    for flag, moment in (("--observed-at", args.observed_at), ("--applied-at", args.applied_at)):
        if moment is not None and moment > now + CLOCK_SKEW:
            raise CommandError(f"{flag} {moment.isoformat()} is in the future")
    observed_at = args.observed_at or now
    receipt = None
    if args.receipt_id:
        receipt = Receipt(args.receipt_id, args.operation_id, args.applied_at or observed_at)
    return Settlement(args.operation_id, args.status, receipt, args.consistency, observed_at)


def run_settle(args: argparse.Namespace) -> int:
    """Record a lookup the operator made at the receiver; APPLIED commits an open operation. Exit 0 once recorded."""
    recorded = settlement(args, _now())
    with connection(args) as open_connection:
        client = OperationsClient(
            open_connection.channel, timeout=open_connection.timeout, policy=open_connection.policy
        )
        try:
            result = client.settle_operation(recorded)
        except DecisionflowError as error:
            raise failed("ops settle", error, args.operation_id, print_json=False) from error
    operation = result.operation
    if args.json:
        emit({"settled": result.settled, "operation": render.as_json(operation, _now())})
    else:
        verb = "settled: now COMMITTED" if result.settled else f"lookup recorded; state {operation.state.value}"
        _out(f"{operation.operation_id}: {verb}")
    return EXIT_DONE
