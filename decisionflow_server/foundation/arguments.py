"""The command-line parser every server command and the reconciler use: a usage error is one line.

argparse prints the whole usage (26 lines for a server) before the line that names the refused
argument; an operator reading a supervisor's log, or a script counting lines, needs only that line.
So a refused argument or setting prints ``<prog>: error: <message>`` on stderr and nothing else,
and exits 2; ``--help`` still prints the usage.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

USAGE_ERROR = 2


class ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line, ``<prog>: error: <message>``, with exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: error: <message>`` (one line) on stderr and exit 2, without the usage."""
        self.exit(USAGE_ERROR, f"{self.prog}: error: {' '.join(message.split())}\n")
