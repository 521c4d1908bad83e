"""``decisionflow demo``: the end-to-end story of docs/demo.md with real, separate processes.

The receiver, two orchestrators one after the other, the reconciler and the ``decisionflow``
review commands all run as child processes over SQLite files in a fresh state directory (or
PostgreSQL by URL); nothing is carried in memory from one step to the next. The transcript is
printed as it happens; the last line is one JSON object whose ``ok`` is true only when every
check held. Exit status: 0 all checks held, 1 a check failed or the demo could not run, 2 bad
usage, 130 interrupted. Every child process is stopped on every path.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from decisionflow_cli.command import CommandError, Subparsers
from decisionflow_server.foundation.settings import MAX_WORKERS, integer

# The servers' own --workers parser: the demo hands the value on to them.
_parse_workers = integer(1, MAX_WORKERS)


def register(subparsers: Subparsers) -> None:
    """Add ``demo``."""
    parser = subparsers.add_parser(
        "demo",
        help="run the end-to-end demo with real processes",
        description=(
            "Start a receiver and an orchestrator, begin case T-1042, restart the orchestrator, approve while "
            "the receiver loses its reply (outcome Unknown), settle it with the reconciler, show replay, "
            "conflict, stale and omitted-decision refusals, and a control experiment with a fresh key per "
            "attempt. Authentication is on: tokens are issued into the state directory."
        ),
        epilog="exit status: 0 every check held; 1 a check failed or the demo could not run; 2 bad usage; "
        "130 interrupted. The last line of stdout is a JSON summary. "
        "With --console: 0 stopped by Ctrl-C (SIGINT) or SIGTERM once running, every part stopped with it; "
        "1 it could not start (the console's address is taken, an extra is missing) or a part stopped on its own; "
        "2 bad usage; 130 interrupted while starting.",
    )
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="directory for databases, tokens and logs; must be empty or absent "
        "(default: a new temporary directory, kept for inspection)",
    )
    parser.add_argument(
        "--orchestrator-database-url",
        metavar="URL",
        help="orchestrator database, e.g. postgresql://user@host/db (default: a SQLite file in the state dir); "
        "must not hold the demo's cases already",
    )
    parser.add_argument(
        "--receiver-database-url",
        metavar="URL",
        help="receiver database (default: a SQLite file in the state dir); must not hold the demo's effects",
    )
    parser.add_argument(
        "--workers",
        metavar="N",
        type=_workers,
        default=1,
        help="server processes for the receiver and for each orchestrator, sharing its port (their --workers; "
        f"1 to {MAX_WORKERS}, default: 1)",
    )
    parser.add_argument(
        "--keep-running",
        choices=("yes", "no"),
        default="no",
        help="yes: leave the receiver and the orchestrator running after the transcript until Ctrl-C (default: no)",
    )
    parser.add_argument(
        "--console",
        action="store_true",
        help="instead of the story: run the review console in front of the demo's receiver and orchestrator, "
        "with two cases waiting for review and a trial identity provider (FOR TRYING ONLY: anyone signs in as "
        "anyone) to sign in with, until Ctrl-C; needs the console and trial extras (make setup installs them). "
        "See docs/console.md#try-it",
    )
    parser.add_argument(
        "--console-address",
        metavar="HOST:PORT",
        default="127.0.0.1:8080",
        help="with --console: the loopback address the console listens on (port 0 picks a free one; "
        "default: 127.0.0.1:8080)",
    )
    parser.add_argument(
        "--lose-replies",
        action="store_true",
        help="with --console: the receiver writes each effect and loses its reply, so every approval answers "
        "Unknown until the demo's reconciler settles it by lookup (a few seconds later)",
    )
    parser.set_defaults(func=_run_demo)


def _workers(text: str) -> int:
    try:
        return _parse_workers(text)
    except ValueError as error:  # argparse shows an ArgumentTypeError's message, not a ValueError's
        raise argparse.ArgumentTypeError(str(error)) from None


def _run_demo(args: argparse.Namespace) -> int:
    # Imported here: the review commands share this parser and need not load the demo's machinery.
    from decisionflow_demo import DemoError, DemoOptions, run_demo
    from decisionflow_demo.run import EXIT_INTERRUPTED

    if args.console:
        return _run_console(args)
    if args.lose_replies:
        raise CommandError("--lose-replies is for --console; the story loses one reply on its own")
    options = DemoOptions(
        state_dir=Path(args.state_dir) if args.state_dir else None,
        orchestrator_database_url=args.orchestrator_database_url,
        receiver_database_url=args.receiver_database_url,
        keep_running=args.keep_running == "yes",
        workers=args.workers,
    )
    try:
        return run_demo(options)
    except DemoError as exc:
        raise CommandError(str(exc), exit_code=exc.exit_code) from exc
    except KeyboardInterrupt:
        # A second Ctrl-C or SIGTERM that lands after the demo has stopped its children, as it hands
        # the signals back, still ends it as interrupted (130), not with a traceback.
        return EXIT_INTERRUPTED


def _run_console(args: argparse.Namespace) -> int:
    from decisionflow_demo import DemoError
    from decisionflow_demo.console import ConsoleDemoOptions, run_console_demo

    if args.keep_running == "yes":
        raise CommandError("--keep-running is for the story; --console always runs until Ctrl-C")
    options = ConsoleDemoOptions(
        state_dir=Path(args.state_dir) if args.state_dir else None,
        orchestrator_database_url=args.orchestrator_database_url,
        receiver_database_url=args.receiver_database_url,
        console_address=args.console_address,
        workers=args.workers,
        lose_replies=args.lose_replies,
    )
    try:
        return run_console_demo(options)
    except DemoError as exc:
        raise CommandError(str(exc), exit_code=exc.exit_code) from exc
