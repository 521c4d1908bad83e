"""The installed version of decisionflow, and the ``--version`` flag every command shares."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

DISTRIBUTION = "decisionflow"


def installed_version() -> str:
    """Return the version of the installed decisionflow distribution ("unknown" when run from a bare tree)."""
    # Imported here: importlib.metadata costs about 0.05 s of CPU, paid by every run of a command
    # if the flag looked the version up while its parser is built.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


class _PrintVersion(argparse.Action):
    """``--version``: print ``PROG VERSION`` on stdout and exit 0, reading the version only when given."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(f"{parser.prog} {installed_version()}\n")
        parser.exit()


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--version``, which prints ``PROG VERSION`` on stdout and exits 0."""
    parser.add_argument("--version", action=_PrintVersion, help="print the version and exit")
