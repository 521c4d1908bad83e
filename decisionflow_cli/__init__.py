"""The ``decisionflow`` command line.

Each command module adds its subcommands through ``register(subparsers)`` and sets ``func`` on
them (see ``decisionflow_cli.command``). ``COMMANDS`` names, for every command word, the module that
registers it. A run imports only the module of the word it was given, so a command pays for its own
dependencies only (``decisionflow health``, a container probe run every few seconds, needs gRPC and
nothing else); ``--help``, ``--version`` and a command line without a known word build every
module's parser. To add a command, write a module with ``register`` and list its words here.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Protocol, cast

from decisionflow_cli.command import (
    USAGE_EXIT_CODE,
    CommandError,
    CommandParser,
    Handler,
    Subparsers,
    UsageError,
)
from decisionflow_server.foundation.version import add_version_flag


class CommandModule(Protocol):
    """A module that contributes subcommands to the ``decisionflow`` parser."""

    def register(self, subparsers: Subparsers) -> None:
        """Add this module's parsers to subparsers, each with ``func`` set to its handler."""


_REVIEW = "decisionflow_cli.review"

# Every command word and the module that registers it, in the order ``decisionflow --help`` lists them.
COMMANDS: Mapping[str, str] = {
    "identity": "decisionflow_cli.identity",
    "token": "decisionflow_cli.token",
    "health": "decisionflow_cli.health",
    "start": _REVIEW,
    "show": _REVIEW,
    "edit": _REVIEW,
    "approve": _REVIEW,
    "decline": _REVIEW,
    "status": _REVIEW,
    "pending": _REVIEW,
    "whoami": _REVIEW,
    "watch": "decisionflow_cli.watch",
    "ops": "decisionflow_cli.ops",
    "audit": "decisionflow_cli.audit",
    "rules": "decisionflow_cli.rules",
    "receiver": "decisionflow_cli.receiver",
    "demo": "decisionflow_cli.demo",
}

# Each module once, in the order of its first word.
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> CommandParser:
    """Return the ``decisionflow`` parser with the subcommands of the named modules (default: all)."""
    parser = CommandParser(
        prog="decisionflow",
        description="Approve exactly once: human approvals bound to the reviewed content.",
    )
    add_version_flag(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in modules:
        cast(CommandModule, importlib.import_module(name)).register(subparsers)
    return parser


def modules_for(argv: Sequence[str]) -> tuple[str, ...]:
    """Return the module that registers argv's command word, or every module when argv does not start
    with one (``--help``, ``--version``, no word, an unknown word): those answers list every command."""
    if argv and argv[0] in COMMANDS:
        return (COMMANDS[argv[0]],)
    return COMMAND_MODULES


def _one_line(text: str) -> str:
    # Scripts read stderr a line at a time: one failure must stay one line.
    return " ".join(text.splitlines()) or "failed"


def main(argv: list[str] | None = None) -> int:
    """Run the command line and return its exit code (2 for bad usage or input); never raises SystemExit."""
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(modules_for(argv))
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        sys.stderr.write(_one_line(f"{exc.prog}: {exc.reason} (see {exc.prog} --help)") + "\n")
        return USAGE_EXIT_CODE
    except SystemExit as exc:
        # Only --help (and similar actions) end parsing this way, with the code argparse chose.
        return exc.code if isinstance(exc.code, int) else 0
    handler: Handler = args.func
    try:
        return handler(args)
    except CommandError as exc:
        sys.stderr.write(_one_line(f"decisionflow {args.command}: {exc.reason}") + "\n")
        return exc.exit_code
