"""How far the sequencer has come: what one pass did, why it did not sign, and how far the log lags the
events written."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.audit_log.ports import PublishedCheckpoint

# Entries per transaction: a backlog never holds SQLite's write turn, or the lock, for long (one pass
# of 1,000 entries took 15 to 45 ms on SQLite and 45 to 80 ms on PostgreSQL on a 2-core test machine).
BATCH = 1000


@dataclass(frozen=True, slots=True)
class SigningRefused:
    """The sequencer did not sign: the log in the database does not extend the checkpoint published outside
    it (the database was restored from an older copy, or the publication is another log's)."""

    published_size: int
    """The size of the published checkpoint (0 when it cannot be read)."""
    size: int
    """The size of the log in the database."""
    reason: str
    """Why, in words for an operator."""


@dataclass(frozen=True, slots=True)
class SequencingPass:
    """One transaction of the sequencer: the entries it gave indices, the log's size after it, the
    checkpoint it signed (None: none was due, or no key is set) and, when it would not sign, why."""

    sequenced: int
    size: int
    checkpoint: PublishedCheckpoint | None
    refused: SigningRefused | None = None


@dataclass(frozen=True, slots=True)
class AuditStatus:
    """The log as the metrics report it, read together (on PostgreSQL each figure by its own statement)."""

    unsequenced: int
    """Entries written but not yet given an index."""
    oldest_unsequenced_at: datetime | None
    """The recorded time of the oldest of them (None when there is none)."""
    size: int
    """Leaves sequenced: the log's size."""
    checkpoint_size: int
    """The size of the newest signed checkpoint (0 before the first)."""
    checkpoint_signed_at: datetime | None
    """When the newest checkpoint was signed (None before the first)."""
    oldest_unsigned_at: datetime | None
    """The recorded time of the first sequenced leaf no checkpoint covers (None when every one is)."""
