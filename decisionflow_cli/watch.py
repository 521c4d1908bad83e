"""``decisionflow watch``: the orchestrator's event feed (docs/events.md) on the terminal or in a script.

Without ``--outcome`` it prints each event as it is sequenced: one JSON object per line with ``--json``
(index, kind, case, operation, action, state, principal, decision, time and the leaf in base64), else a
short line. It starts at ``--from-index`` (default 0) or ``--from-now``, follows the log and reconnects
from its cursor after a restart or failover, and ends after ``--count`` events, after ``--seconds``, or
on Ctrl-C. With ``--outcome OPERATION_ID`` it waits instead, without polling, until that operation is
settled (COMMITTED, DECLINED, REJECTED, EXPIRED or SUPERSEDED) and prints it as ``decisionflow status``
does.

Exit status:
  0   done: --count events, --seconds passed, interrupted, or the operation settled (--outcome)
  3   refused: a bad filter, not found (an author watches only the cases they proposed in), permission denied
  1   error: unavailable beyond --timeout, or --outcome's wait ended before the operation settled
  2   bad usage
"""

from __future__ import annotations

import argparse
import base64
import time
from typing import Any

from decisionflow.client import EventsClient, EventView, ReviewClient, WaitTimedOut
from decisionflow.client.errors import DeadlineExceeded, DecisionflowError
from decisionflow.client.events import KINDS
from decisionflow_cli.command import CommandError, Subparsers, positive_count
from decisionflow_cli.review._connection import CONNECTION_SETTINGS, connection
from decisionflow_cli.review._output import EXIT_DONE, EXIT_ERROR, emit, failed, say
from decisionflow_server.foundation.settings import add_settings

DESCRIPTION = __doc__.split("\n\nExit status:")[0].split("\n\n", 1)[1] if __doc__ else ""
EPILOG = "Exit status:" + __doc__.split("\n\nExit status:")[1] if __doc__ else ""


def event_fields(event: EventView) -> dict[str, Any]:
    """An event as the JSON lines print it."""
    return {
        "index": event.index,
        "kind": event.kind,
        "case_id": event.case_id,
        "operation_id": event.operation_id,
        "action": event.action,
        "state": event.state,
        "principal": event.principal,
        "decision": event.decision if event.kind in ("decision", "vote") else None,
        "occurred_at": event.occurred_at,
        "leaf": base64.b64encode(event.leaf).decode("ascii"),
    }


def _line(event: EventView) -> str:
    who = f" by {event.principal}" if event.principal else ""
    return f"#{event.index} {event.kind} {event.case_id} {event.operation_id}: {event.state.value}{who}"


def _wait(args: argparse.Namespace) -> int:
    with connection(args) as opened:
        reviews = ReviewClient(opened.channel, timeout=opened.timeout, policy=opened.policy)
        try:
            operation = reviews.wait_for_outcome(args.outcome, timeout=args.seconds or opened.timeout)
        except WaitTimedOut as waited:
            emit({"command": "watch", "operation_id": args.outcome, "settled": False, "operation": waited.operation})
            say(f"operation {args.outcome}: still {waited.operation.state.value} when the wait ended")
            return EXIT_ERROR
        except DecisionflowError as error:
            raise failed("watch", error, args.outcome, operation_id=args.outcome) from error
    emit(
        {
            "command": "watch",
            "operation_id": operation.operation_id,
            "settled": True,
            "state": operation.state,
            "operation": operation,
        }
    )
    receipt = f", receipt {operation.receipt_id}" if operation.receipt_id else ""
    say(f"operation {operation.operation_id}: {operation.state.value}{receipt}")
    return EXIT_DONE


def run_watch(args: argparse.Namespace) -> int:
    """Print events as they are sequenced, or wait for one operation's outcome (--outcome)."""
    if args.outcome:
        return _wait(args)
    seen = 0
    with connection(args) as opened:
        events = EventsClient(opened.channel, timeout=opened.timeout, policy=opened.policy)
        until = None if args.seconds is None else time.monotonic() + args.seconds
        stream = events.watch(
            start_index=args.from_index,
            from_now=args.from_now,
            case_id=args.case_id,
            operation_id=args.operation_id,
            action=args.action,
            kinds=args.kind or (),
            until=until,
        )
        try:
            for item in stream:
                assert isinstance(item, EventView)
                if args.json:
                    emit(event_fields(item))
                else:
                    print(_line(item), flush=True)
                seen += 1
                if args.count is not None and seen >= args.count:
                    break
        except DeadlineExceeded:
            pass  # --seconds passed
        except KeyboardInterrupt:
            pass
        except DecisionflowError as error:
            raise failed("watch", error, "the event feed", print_json=args.json) from error
        finally:
            stream.close()
    say(f"watch: {seen} events")
    return EXIT_DONE


def _kind(text: str) -> str:
    if text not in KINDS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(KINDS)}, not {text!r}")
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, not {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected more than 0 seconds, not {text!r}")
    return value


def register(subparsers: Subparsers) -> None:
    """Add ``watch``."""
    parser = subparsers.add_parser(
        "watch",
        help="follow the event feed, or wait for an operation's outcome",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings(parser, CONNECTION_SETTINGS)
    parser.set_defaults(func=run_watch)
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-index", type=int, default=0, metavar="N", help="the first log index to print (0)")
    start.add_argument("--from-now", action="store_true", help="only events sequenced after the command starts")
    parser.add_argument("--case-id", help="only this case's events (an author must name a case or operation)")
    parser.add_argument("--operation-id", help="only this operation's events")
    parser.add_argument("--action", help="only events of operations of this action")
    parser.add_argument(
        "--kind", action="append", type=_kind, metavar="KIND", help=f"only these kinds ({', '.join(KINDS)})"
    )
    parser.add_argument("--count", type=positive_count, metavar="N", help="end after N events")
    parser.add_argument("--seconds", type=_seconds, metavar="S", help="end after S seconds (--outcome: wait at most S)")
    parser.add_argument("--json", action="store_true", help="one JSON object per event on stdout")
    parser.add_argument(
        "--outcome", metavar="OPERATION_ID", help="wait until this operation is settled and print it (JSON)"
    )


__all__ = ["CommandError", "event_fields", "register", "run_watch"]
