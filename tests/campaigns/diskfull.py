"""Small size-limited filesystems (tmpfs) that a test fills with a ballast file and empties again."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

BALLAST = "ballast"
_CHUNK = b"\0" * 65536


@dataclass(frozen=True)
class SmallFilesystem:
    """A mounted tmpfs of a fixed size; fill() takes every free byte, free() gives them back."""

    path: Path

    def fill(self) -> int:
        """Write the ballast file until the filesystem refuses (ENOSPC); return the bytes written."""
        written = 0
        # Unbuffered: a buffered file would try to flush what did not fit once more when closed,
        # and fail there with ENOSPC.
        with (self.path / BALLAST).open("ab", buffering=0) as ballast:
            # Small writes can still fit in the last partial block: take those bytes too.
            for size in (len(_CHUNK), 4096, 512, 1):
                try:
                    while True:
                        written += ballast.write(_CHUNK[:size]) or 0
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
        return written

    def free(self) -> None:
        """Delete the ballast file."""
        (self.path / BALLAST).unlink(missing_ok=True)

    def available(self) -> int:
        """Free bytes on the filesystem."""
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize


def _mount(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("a size-limited tmpfs needs root (mount -t tmpfs)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"the kernel refused a tmpfs mount: {done.stderr.strip()}")


def _unmount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
        # A process that still holds a file open keeps the mount busy: detach it lazily.
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@contextmanager
def small_filesystems(root: Path, *names: str, size: str = "8m") -> Iterator[dict[str, SmallFilesystem]]:
    """Mount one tmpfs of size per name under root; unmount them all afterwards, even on failure."""
    with ExitStack() as stack:
        mounted: dict[str, SmallFilesystem] = {}
        for name in names:
            path = root / name
            _mount(path, size)
            stack.callback(_unmount, path)
            mounted[name] = SmallFilesystem(path)
        yield mounted


def truncate_wal(database: Path) -> None:
    """Checkpoint an SQLite file's write-ahead log into it and truncate the log to zero bytes.

    A log that has been reset after a checkpoint keeps its size and is written again from the
    start, so writes into it need no new blocks: on a disk filled afterwards they would still
    succeed. With the log truncated first, the writes that follow must grow it.
    """
    connection = sqlite3.connect(database, timeout=30)
    try:
        busy, _, _ = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        connection.close()
    assert busy == 0, f"the write-ahead log of {database} could not be truncated (a reader or writer held it)"


def integrity(database: Path) -> list[str]:
    """PRAGMA integrity_check of an SQLite file, opened read-only (["ok"] when intact)."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        return [str(row[0]) for row in connection.execute("PRAGMA integrity_check")]
    finally:
        connection.close()
