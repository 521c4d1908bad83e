"""Where the audit log's signed checkpoints are published outside its database: a directory in the
C2SP tlog-tiles layout, of which the sequencer writes ``checkpoint`` (the newest signed note).

The database can be restored from an older copy; this directory is not restored with it, so it
remembers the newest checkpoint the log ever vouched for. The sequencer reads it before signing and
refuses to sign a tree that does not extend it (``orchestrator.store`` compares the roots), because
a log that signs two trees of which neither extends the other has forked (C2SP ``tlog-checkpoint``:
a log must never do that). Anyone may copy the directory to a static web server or an object store;
the orchestrator also serves ``/checkpoint`` from it on its metrics endpoint.

Writes are whole or nothing (a temporary file renamed over the old one) and only ever grow the
size: several workers or replicas may share the directory, so each write takes an exclusive lock
on ``.lock`` and keeps the larger of the two checkpoints.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from decisionflow.transparency import Checkpoint, TransparencyError, parse_checkpoint, parse_note

CHECKPOINT_NAME = "checkpoint"
_LOCK_NAME = ".lock"


class UnreadablePublication(Exception):
    """The published checkpoint exists but cannot be read or is not a checkpoint: nothing may be signed
    until an operator looks."""


@dataclass(frozen=True, slots=True)
class PublishedNote:
    """The published checkpoint: the signed note's exact text and the checkpoint it states."""

    signed_note: str
    checkpoint: Checkpoint


def read_note(text: str) -> PublishedNote:
    """The checkpoint a signed note states (its signature is the signer's, not checked here);
    TransparencyError when the text is not a signed checkpoint."""
    return PublishedNote(text, parse_checkpoint(parse_note(text).text))


class CheckpointDirectory:
    """The directory the sequencer publishes the log's newest signed checkpoint to (created when missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def checkpoint_file(self) -> Path:
        """The published checkpoint's file: ``<directory>/checkpoint``, as tlog-tiles names it."""
        return self.path / CHECKPOINT_NAME

    def read_bytes(self) -> bytes | None:
        """The published checkpoint's bytes as a reader fetches them; None before the first is published."""
        try:
            return self.checkpoint_file.read_bytes()
        except FileNotFoundError:
            return None

    def latest(self) -> PublishedNote | None:
        """The newest published checkpoint, None before the first; UnreadablePublication when the file
        cannot be read or holds no signed checkpoint."""
        try:
            raw = self.read_bytes()
        except OSError as exc:
            raise UnreadablePublication(f"cannot read {self.checkpoint_file}: {exc.strerror or exc}") from exc
        if raw is None:
            return None
        try:
            return read_note(raw.decode("utf-8"))
        except (UnicodeDecodeError, TransparencyError) as exc:
            raise UnreadablePublication(f"{self.checkpoint_file} holds no signed checkpoint: {exc}") from exc

    def publish(self, signed_note: str) -> bool:
        """Publish signed_note unless the directory already holds a checkpoint at least as large; True when
        it was written. The caller has checked that it extends the one published."""
        size = read_note(signed_note).checkpoint.size
        with self._locked():
            current = self.latest()
            if current is not None and current.checkpoint.size >= size:
                return False
            self._replace(signed_note)
            return True

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)  # closing releases the lock

    def _replace(self, signed_note: str) -> None:
        descriptor, temporary = tempfile.mkstemp(prefix=".checkpoint-", dir=self.path)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as file:
                file.write(signed_note)
                file.flush()
                os.fsync(file.fileno())
            os.chmod(temporary, 0o644)  # published: anyone may read it
            os.replace(temporary, self.checkpoint_file)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        # The rename is durable only once the directory is.
        directory = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
