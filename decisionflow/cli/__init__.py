"""The ``decisionflow`` command line.

Each module in ``COMMAND_MODULES`` adds its subcommands through ``register(subparsers)`` and
sets ``func`` on them (see ``decisionflow.cli.command``). To add a command, write a module with
``register`` and list it here.
"""

from __future__ import annotations

import sys
from typing import Protocol

from decisionflow.cli import demo, health, identity, ops, receiver, review, token
from decisionflow.cli.command import (
    USAGE_EXIT_CODE,
    CommandError,
    CommandParser,
    Handler,
    Subparsers,
    UsageError,
)
from decisionflow.version import add_version_flag


class CommandModule(Protocol):
    """A module that contributes subcommands to the ``decisionflow`` parser."""

    def register(self, subparsers: Subparsers) -> None:
        """Add this module's parsers to subparsers, each with ``func`` set to its handler."""


COMMAND_MODULES: tuple[CommandModule, ...] = (identity, token, health, review, ops, receiver, demo)


def build_parser() -> CommandParser:
    """Return the ``decisionflow`` parser with the subcommands of every module in COMMAND_MODULES."""
    parser = CommandParser(
        prog="decisionflow",
        description="Approve exactly once: human approvals bound to the reviewed content.",
    )
    add_version_flag(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def _one_line(text: str) -> str:
    # Scripts read stderr a line at a time: one failure must stay one line.
    return " ".join(text.splitlines()) or "failed"


def main(argv: list[str] | None = None) -> int:
    """Run the command line and return its exit code (2 for bad usage or input); never raises SystemExit."""
    parser = build_parser()
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
