"""The cursor file: the index of the first event JetStream has not acknowledged, as one line of ASCII
decimal digits. It is written aside, flushed to disk, renamed over the old one and its directory flushed,
so that after a crash the file holds either the old cursor or the new one, never a torn one."""

from __future__ import annotations

import os
from pathlib import Path

from decisionflow_relay.errors import CursorFileError


class CursorFile:
    """Reads and atomically replaces the cursor file at path."""

    def __init__(self, path: Path) -> None:
        self.path = path

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
        """Replace the stored cursor with cursor: temporary file, fsync, rename, fsync of the directory."""
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

    def check_writable(self) -> None:
        """Raise CursorFileError now, at start, when the cursor cannot be stored (rewrites the stored value)."""
        if not self.path.parent.is_dir():
            raise CursorFileError(self.path, f"its directory {self.path.parent} does not exist")
        self.write(self.read())
