"""What the AuditService reads from the log: the port between the servicer and the store.

Indices are the log's (0-based, contiguous, assigned by the sequencer); a size is a number of leaves.
Only the sequenced prefix is visible here: an entry written but not yet sequenced has no index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from decisionflow.vocabulary import CaseId, OperationId


@dataclass(frozen=True, slots=True)
class LoggedLeaf:
    """One sequenced leaf: its index and its canonical bytes (decisionflow.transparency.encode_leaf)."""

    index: int
    data: bytes


@dataclass(frozen=True, slots=True)
class PublishedCheckpoint:
    """A signed checkpoint as published: its size, root hash and the signed note's exact text."""

    size: int
    root_hash: bytes
    signed_note: str
    signed_at: datetime


class AuditLogReader(Protocol):
    """Reads of the sequenced log; each call is one consistent snapshot."""

    def latest_checkpoint(self) -> PublishedCheckpoint | None:
        """The newest signed checkpoint, None before the first is published."""
        ...

    def checkpoint(self, size: int) -> PublishedCheckpoint | None:
        """The checkpoint published at exactly this size, None when none was."""
        ...

    def leaves(self, start: int, limit: int) -> Sequence[LoggedLeaf]:
        """Up to limit sequenced leaves from index start, in index order."""
        ...

    def leaf_indices(self, operation_id: OperationId | None = None, case_id: CaseId | None = None) -> Sequence[int]:
        """The indices of every sequenced leaf of an operation, or of every operation of a case, ascending."""
        ...

    def inclusion_proof(self, index: int, size: int) -> Sequence[bytes]:
        """RFC 9162 inclusion proof of leaf index in the tree of the first size leaves (size ≤ sequenced)."""
        ...

    def consistency_proof(self, old_size: int, new_size: int) -> Sequence[bytes]:
        """RFC 9162 consistency proof between the trees of old_size and new_size leaves."""
        ...
