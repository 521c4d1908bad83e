"""The error a service that cannot start raises, and the one line that reports it.

A service that cannot start logs one JSON line at level error (``decisionflow_server.foundation.logs``) whose
message reads ``<program>: <what failed> (<flag> / <environment variable>): <cause>`` and exits:

- 2 (``EXIT_CONFIGURATION``): a setting is wrong (``configuration_error``);
- 1 (``EXIT_RUNTIME``): the setting may be right but the world is not ready (``runtime_error``).

A leaf: every layer may raise these (the runtime's checks in decisionflow_server.runtime.startup, the storage
layer's opening of a database, the metrics endpoint's port), and it imports only the settings.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from decisionflow_server.foundation.settings import Setting

EXIT_RUNTIME = 1
EXIT_CONFIGURATION = 2


class StartupError(Exception):
    """A service could not start: what failed, the settings that decide it, the cause and the exit status."""

    def __init__(self, what: str, settings: Sequence[Setting[Any]], cause: str, *, exit_status: int) -> None:
        self.what = what
        self.settings = tuple(settings)
        self.cause = one_line(cause)
        self.exit_status = exit_status
        super().__init__(str(self))

    def __str__(self) -> str:
        """Return ``what (settings): cause``."""
        named = f" ({setting_names(self.settings)})" if self.settings else ""
        return f"{self.what}{named}: {self.cause}"


def configuration_error(what: str, settings: Sequence[Setting[Any]], cause: str) -> StartupError:
    """Return a StartupError that exits 2: the named settings must change."""
    return StartupError(what, settings, cause, exit_status=EXIT_CONFIGURATION)


def runtime_error(what: str, settings: Sequence[Setting[Any]], cause: str) -> StartupError:
    """Return a StartupError that exits 1: starting again may work once the cause is gone."""
    return StartupError(what, settings, cause, exit_status=EXIT_RUNTIME)


def setting_names(settings: Sequence[Setting[Any]]) -> str:
    """Return ``--flag / ENV`` for each setting (only the flag for a flag-only one), comma-separated."""
    return ", ".join(s.flag if s.flag_only or s.switch else f"{s.flag} / {s.env}" for s in settings)


def one_line(text: str) -> str:
    """Return text with every run of whitespace, line breaks included, made one space."""
    return " ".join(text.split()) or "failed"


def describe(exc: BaseException) -> str:
    """Return an exception's message, or its type when it has none (``FileNotFoundError`` alone says nothing)."""
    message = str(exc).strip()
    return message or type(exc).__name__


def report(program: str, error: StartupError, logger: logging.Logger, *, debug: bool, service: str | None) -> int:
    """Log error as one line naming program (with the traceback only when debug); return its exit status."""
    cause = error.__cause__ or error
    logger.error(
        "%s: %s",
        program,
        error,
        exc_info=(type(cause), cause, cause.__traceback__) if debug else None,
        extra={"service": service, "setting": ",".join(s.flag for s in error.settings) or None},
    )
    return error.exit_status
