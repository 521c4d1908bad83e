"""The installed version of decisionflow, and the ``--version`` flag every command shares."""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "decisionflow"


def installed_version() -> str:
    """Return the version of the installed decisionflow distribution ("unknown" when run from a bare tree)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--version``, which prints ``PROG VERSION`` on stdout and exits 0."""
    parser.add_argument(
        "--version", action="version", version=f"{parser.prog} {installed_version()}", help="print the version and exit"
    )
