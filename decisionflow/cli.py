"""The ``decisionflow`` command line."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the decisionflow command line."""
    sys.stderr.write("decisionflow: not built yet\n")
    return 2
