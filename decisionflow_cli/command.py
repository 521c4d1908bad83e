"""What a command module needs: the subparsers type, the parser class and the expected-failure error.

A command module exposes ``register(subparsers) -> None``; it adds its parser(s) and sets
``func`` on each to a handler ``(argparse.Namespace) -> int`` that returns the exit code.
Expected failures are raised as ``CommandError``; ``main`` prints them as one line on stderr.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn, TypeAlias

Subparsers: TypeAlias = "argparse._SubParsersAction[CommandParser]"
Handler: TypeAlias = Callable[[argparse.Namespace], int]

USAGE_EXIT_CODE = 2


class CommandError(Exception):
    """An expected failure of a command: a one-line reason and the exit code to end with."""

    def __init__(self, reason: str, exit_code: int = USAGE_EXIT_CODE) -> None:
        super().__init__(reason)
        self.reason = reason
        self.exit_code = exit_code


class UsageError(Exception):
    """The command line does not match the parser of ``prog``."""

    def __init__(self, prog: str, reason: str) -> None:
        super().__init__(f"{prog}: {reason}")
        self.prog = prog
        self.reason = reason


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser that raises UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        """Raise UsageError so that ``main`` decides what is printed and returns the exit code."""
        raise UsageError(self.prog, message)


def positive_count(text: str) -> int:
    """Return a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, not {text!r}")
    return value
