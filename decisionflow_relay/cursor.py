"""The cursor file: the index of the first event JetStream has not acknowledged, as one line of ASCII
decimal digits. It is written aside, flushed to disk, renamed over the old one and its directory flushed,
so that after a crash the file holds either the old cursor or the new one, never a torn one.

One relay per cursor file: a relay holds an exclusive lock on ``<cursor file>.lock`` while it runs (the
kernel drops it when the process ends, even by SIGKILL), and a second relay on the same file is refused
at start instead of moving the cursor under the first."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from decisionflow_relay.errors import CursorFileError


class CursorFile:
    """Reads and atomically replaces the cursor file at path."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock: int | None = None
        # Writes run in worker threads; one at a time, and never back below a cursor already stored (a write
        # still running when the relay stops must not interleave with the last one, nor undo it).
        self._writing = threading.Lock()
        self._stored: int | None = None

    def lock(self) -> None:
        """Hold the cursor file's lock for the life of the process; CursorFileError when another holds it."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise CursorFileError(self.path, f"cannot be locked ({lock_path}): {exc}") from exc
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise CursorFileError(self.path, f"is in use by another relay (it holds {lock_path})") from None
        self._lock = descriptor

    def unlock(self) -> None:
        """Let the lock go (the process's end does too)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def read(self) -> int:
        """The cursor stored, 0 when there is no file yet (the log's first event)."""
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return 0
        except (OSError, UnicodeDecodeError) as exc:
            raise CursorFileError(self.path, f"cannot be read: {exc}") from exc
        stripped = text.strip()
        if not stripped.isdigit() or not stripped.isascii():
            raise CursorFileError(self.path, f"does not hold an index (decimal digits): {text[:40]!r}")
        return int(stripped)

    def write(self, cursor: int) -> None:
        """Replace the stored cursor with cursor: temporary file, fsync, rename, fsync of the directory. A
        cursor below one this object already stored is not written (the cursor only moves forward)."""
        with self._writing:
            if self._stored is not None and cursor < self._stored:
                return
            self._replace(cursor)
            self._stored = cursor

    def _replace(self, cursor: int) -> None:
        partial = self.path.with_name(self.path.name + ".partial")
        try:
            with partial.open("w", encoding="ascii") as handle:
                handle.write(f"{cursor}\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, self.path)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            raise CursorFileError(self.path, f"cannot be written: {exc}") from exc

    def open(self) -> None:
        """At start: lock the file and check the cursor can be read and stored (the stored value is
        rewritten); CursorFileError when it cannot, or another relay holds it."""
        if not self.path.parent.is_dir():
            raise CursorFileError(self.path, f"is in a directory that does not exist ({self.path.parent})")
        self.lock()
        self.write(self.read())
