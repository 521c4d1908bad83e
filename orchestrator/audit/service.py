"""The AuditService's use cases over the log reader: checkpoints, proofs and pages of leaves.

Only what a signed checkpoint covers is served: a tree size of 0 means the latest checkpoint's,
and any size above it is refused (BeyondCheckpoint), since a proof at a size nobody signed helps
no auditor and the leaves past the checkpoint are the sequencer's business until it signs them.

    asked                                   answer
    tree size 0, no checkpoint yet          size 0 (no leaves); a proof: BeyondCheckpoint
    tree size above the latest checkpoint   BeyondCheckpoint (checkpoint_size: the latest's)
    a leaf at or beyond the tree size       BeyondCheckpoint
    an operation or case with no leaf       NotLogged
    ... whose leaves all lie beyond it      BeyondCheckpoint
    old size above the new                  BeyondCheckpoint (the new size was the latest's)

A page ends at its limit or before its bytes would pass ANSWER_BYTES, whichever comes first, but
always holds one entry: the largest leaf (a proposal at every bound, about 370 KB) fits.
The reader's calls block (a database), so each runs in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from decisionflow.transparency import HASH_SIZE
from decisionflow.vocabulary import CaseId, OperationId
from orchestrator.audit.errors import BeyondCheckpoint, CheckpointNotFound, NotLogged
from orchestrator.audit_log.ports import AuditLogReader, LoggedLeaf, PublishedCheckpoint

_T = TypeVar("_T")

# Room for the rest of a response under the 1 MiB message limit every client keeps to.
ANSWER_BYTES = 768 * 1024
# What a proof hash or a leaf costs on the wire beyond its bytes: a tag and a length.
_FRAMING_BYTES = 8


@dataclass(frozen=True, slots=True)
class Selection:
    """Which leaves to prove: exactly one of a leaf by index, an operation's leaves, a case's leaves."""

    leaf_index: int | None = None
    operation_id: OperationId | None = None
    case_id: CaseId | None = None


@dataclass(frozen=True, slots=True)
class LeafProof:
    """A leaf and its inclusion proof in the tree of the page's size."""

    leaf: LoggedLeaf
    hashes: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class ProofPage:
    """Inclusion proofs in the tree of tree_size leaves; more is True when leaves after the last remain."""

    tree_size: int
    checkpoint: PublishedCheckpoint | None
    proofs: tuple[LeafProof, ...]
    more: bool


@dataclass(frozen=True, slots=True)
class ConsistencyAnswer:
    """The consistency proof from old_size to new_size leaves, and the checkpoint signed at new_size, if any."""

    old_size: int
    new_size: int
    hashes: tuple[bytes, ...]
    checkpoint: PublishedCheckpoint | None


@dataclass(frozen=True, slots=True)
class LeafPage:
    """Leaves of the tree of tree_size leaves in index order; more is True when leaves after the last remain."""

    tree_size: int
    leaves: tuple[LoggedLeaf, ...]
    more: bool


@dataclass(frozen=True, slots=True)
class _Tree:
    size: int
    checkpoint: PublishedCheckpoint | None
    signed: int  # the latest checkpoint's size, 0 before the first


def _cost(data: bytes, hashes: int = 0) -> int:
    return len(data) + _FRAMING_BYTES + hashes * (HASH_SIZE + _FRAMING_BYTES)


class AuditLog:
    """The reads of the AuditService: each answer is about one tree a checkpoint covers."""

    def __init__(self, reader: AuditLogReader) -> None:
        self._reader = reader

    async def _call(self, read: Callable[..., _T], *args: int) -> _T:
        return await asyncio.to_thread(read, *args)

    async def _tree(self, tree_size: int) -> _Tree:
        latest = await self._call(self._reader.latest_checkpoint)
        signed = 0 if latest is None else latest.size
        if tree_size == 0:
            return _Tree(signed, latest, signed)
        if tree_size > signed:
            raise BeyondCheckpoint(signed, tree_size=tree_size)
        if latest is not None and tree_size == latest.size:
            return _Tree(tree_size, latest, signed)
        return _Tree(tree_size, await self._call(self._reader.checkpoint, tree_size), signed)

    async def checkpoint(self, tree_size: int) -> PublishedCheckpoint:
        """The checkpoint signed at tree_size (0: the latest); CheckpointNotFound when none was."""
        latest = await self._call(self._reader.latest_checkpoint)
        if latest is None:
            raise CheckpointNotFound(tree_size or None)
        if tree_size in (0, latest.size):
            return latest
        # Above the latest nothing was signed; asking the store would only bind a number it may not hold.
        found = None if tree_size > latest.size else await self._call(self._reader.checkpoint, tree_size)
        if found is None:
            raise CheckpointNotFound(tree_size)
        return found

    async def inclusion_proofs(self, selection: Selection, tree_size: int, after: int | None, limit: int) -> ProofPage:
        """Proofs of the selected leaves with an index above after, at most limit of them (a page)."""
        tree = await self._tree(tree_size)
        indices = await self._indices(selection, tree)
        waiting = [index for index in indices if after is None or index > after]
        proofs = await asyncio.to_thread(self._proofs, waiting[:limit], tree.size)
        return ProofPage(tree.size, tree.checkpoint, proofs, len(proofs) < len(waiting))

    async def _indices(self, selection: Selection, tree: _Tree) -> list[int]:
        if selection.leaf_index is not None:
            if selection.leaf_index >= tree.size:
                raise BeyondCheckpoint(tree.signed, tree_size=tree.size, leaf_index=selection.leaf_index)
            return [selection.leaf_index]
        logged = await asyncio.to_thread(
            self._reader.leaf_indices, operation_id=selection.operation_id, case_id=selection.case_id
        )
        if not logged:
            raise NotLogged(operation_id=selection.operation_id, case_id=selection.case_id)
        within = sorted(index for index in logged if index < tree.size)
        if not within:
            raise BeyondCheckpoint(
                tree.signed, tree_size=tree.size, operation_id=selection.operation_id, case_id=selection.case_id
            )
        return within

    def _proofs(self, indices: Sequence[int], size: int) -> tuple[LeafProof, ...]:
        proofs: list[LeafProof] = []
        spent = 0
        for index in indices:
            leaf = self._leaf(index)
            hashes = tuple(self._reader.inclusion_proof(index, size))
            spent += _cost(leaf.data, len(hashes))
            if proofs and spent > ANSWER_BYTES:
                break
            proofs.append(LeafProof(leaf, hashes))
        return tuple(proofs)

    def _leaf(self, index: int) -> LoggedLeaf:
        found = list(self._reader.leaves(index, 1))
        if not found or found[0].index != index:
            # The reader listed the index among the leaves a moment ago; the log is append-only.
            raise RuntimeError(f"the audit log reader has no leaf {index} though it listed it")
        return found[0]

    async def consistency_proof(self, old_size: int, new_size: int) -> ConsistencyAnswer:
        """The proof that the tree of new_size leaves (0: the latest checkpoint's) extends the tree of old_size."""
        tree = await self._tree(new_size)
        if old_size > tree.size:
            raise BeyondCheckpoint(tree.signed, tree_size=old_size)
        hashes: Sequence[bytes] = ()
        if old_size < tree.size:
            hashes = await self._call(self._reader.consistency_proof, old_size, tree.size)
        return ConsistencyAnswer(old_size, tree.size, tuple(hashes), tree.checkpoint)

    async def leaves(self, tree_size: int, start: int, limit: int) -> LeafPage:
        """Up to limit leaves of the tree of tree_size leaves (0: the latest checkpoint's) from index start."""
        tree = await self._tree(tree_size)
        if start >= tree.size:
            return LeafPage(tree.size, (), False)
        read = await self._call(self._reader.leaves, start, min(limit, tree.size - start))
        page: list[LoggedLeaf] = []
        spent = 0
        for leaf in read:
            spent += _cost(leaf.data)
            if leaf.index >= tree.size or (page and spent > ANSWER_BYTES):
                break
            page.append(leaf)
        more = bool(page) and page[-1].index + 1 < tree.size
        return LeafPage(tree.size, tuple(page), more)
