"""The relay's failures.

RelayError                  base
├── CursorFileError         the cursor file cannot be read, parsed or written: exit 2 at start,
│                           exit 1 while running (the cursor kept is the last one written)
├── PublishFailed           one publish was not acknowledged (broker down, no stream leader,
│                           timeout): retried with back-off, never skipped
└── WatchRefused            the orchestrator refused the watch for good (credentials, role,
                            request): exit 2
"""

from __future__ import annotations

from pathlib import Path


class RelayError(Exception):
    """Base of the relay's failures."""


class CursorFileError(RelayError):
    """The cursor file at path cannot be used; the message says why."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"cursor file {path} {why}")
        self.path = path


class PublishFailed(RelayError):
    """A publish was not acknowledged by JetStream; cause names what the client reported."""

    def __init__(self, subject: str, cause: str) -> None:
        super().__init__(f"publish to {subject} was not acknowledged: {cause}")
        self.subject = subject
        self.cause = cause


class WatchRefused(RelayError):
    """The orchestrator refused the watch with a status no retry changes (code and reason as it sent them)."""

    def __init__(self, code: str, reason: str, message: str) -> None:
        named = code if reason in ("", code) else f"{code}, {reason}"
        super().__init__(f"the orchestrator refused WatchEvents ({named}): {message}")
        self.code = code
        self.reason = reason
