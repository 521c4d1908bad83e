"""Subtree hashes of a large log from a few stored nodes, and the compact range that grows it.

A *perfect subtree* is the node at (level, index): it covers leaves [index·2^level, (index+1)·2^level)
and its hash never changes once the last of those leaves is appended. A log that stores the hash
of every perfect subtree as it completes (CompactRange.append returns them: about two per leaf)
can later compute

- its root at any size n from the popcount(n) perfect subtrees that make up [0, n), and
- every hash a proof needs: each is MTH(D[start:end]) of a *tree node*, a range whose start is a
  multiple of the smallest power of two ≥ end - start, and such a range is at most ⌈log2 n⌉
  perfect subtrees, folded right to left (range_hash).

So nothing holds every leaf in memory; a proof costs O(log² n) stored nodes at most.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from decisionflow.transparency._errors import InvalidTreeRange, MalformedHash
from decisionflow.transparency._hashing import EMPTY_ROOT, HASH_SIZE, node_hash

SubtreeHash = Callable[[int, int], bytes]
"""MTH(D[start:end]) of one tree node: the hashes proof generation reads (see subtree_hashes_*)."""

NodeReader = Callable[[int, int], bytes]
"""The stored hash of the perfect subtree at (level, index)."""


@dataclass(frozen=True, slots=True)
class StoredNode:
    """The hash of the perfect subtree at (level, index): leaves [index·2^level, (index+1)·2^level)."""

    level: int
    index: int
    hash: bytes


def perfect_subtrees(start: int, end: int) -> tuple[tuple[int, int], ...]:
    """The (level, index) of the perfect subtrees that make up leaves [start, end), left to right."""
    if not 0 <= start <= end:
        raise InvalidTreeRange(f"no leaves [{start}, {end})")
    nodes = []
    while start < end:
        # The largest perfect subtree that starts at start (aligned) and ends by end.
        level = (end - start).bit_length() - 1
        if start:
            level = min(level, (start & -start).bit_length() - 1)
        nodes.append((level, start >> level))
        start += 1 << level
    return tuple(nodes)


def range_hash(start: int, end: int, read_node: NodeReader) -> bytes:
    """MTH(D[start:end]) of a tree node from the stored hashes of its perfect subtrees."""
    size = end - start
    if size <= 0 or start % (1 << (size - 1).bit_length()):
        raise InvalidTreeRange(f"leaves [{start}, {end}) are not a node of the tree")
    # A tree node's perfect subtrees shrink from left to right; MTH splits off the largest on the
    # left each time, so the hash is the right-to-left fold of the subtree hashes.
    hashes = [read_node(level, index) for level, index in perfect_subtrees(start, end)]
    folded = hashes[-1]
    for left in reversed(hashes[:-1]):
        folded = node_hash(left, folded)
    return folded


def subtree_hashes_of_nodes(read_node: NodeReader) -> SubtreeHash:
    """Proof hashes read from stored perfect-subtree hashes (a log that never holds every leaf)."""

    def subtree_hash(start: int, end: int) -> bytes:
        return range_hash(start, end, read_node)

    return subtree_hash


def subtree_hashes_of_leaves(leaf_hashes: Sequence[bytes]) -> SubtreeHash:
    """Proof hashes computed from every leaf hash in order (each perfect subtree hashed once, up front)."""
    levels = [list(leaf_hashes)]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])

    def read_node(level: int, index: int) -> bytes:
        return levels[level][index]

    def subtree_hash(start: int, end: int) -> bytes:
        if end > len(leaf_hashes):
            raise InvalidTreeRange(f"leaves [{start}, {end}) but only {len(leaf_hashes)} leaf hashes")
        return range_hash(start, end, read_node)

    return subtree_hash


@dataclass(frozen=True, slots=True)
class CompactRange:
    """The hashes of the perfect subtrees that make up leaves [0, size), largest first: a log's state."""

    size: int = 0
    peaks: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if self.size < 0 or len(self.peaks) != self.size.bit_count():
            raise InvalidTreeRange(f"a tree of {self.size} leaves has {self.size.bit_count()} perfect subtrees")
        for peak in self.peaks:
            if len(peak) != HASH_SIZE:
                raise MalformedHash("a perfect subtree hash", len(peak))

    @classmethod
    def at_size(cls, size: int, read_node: NodeReader) -> CompactRange:
        """The compact range of a log of size leaves, from its stored perfect-subtree hashes."""
        return cls(size, tuple(read_node(level, index) for level, index in perfect_subtrees(0, size)))

    def append(self, leaf_hash: bytes) -> tuple[CompactRange, tuple[StoredNode, ...]]:
        """The range with one more leaf, and the perfect subtrees that leaf completes (the leaf first)."""
        if len(leaf_hash) != HASH_SIZE:
            raise MalformedHash("the leaf hash", len(leaf_hash))
        peaks = list(self.peaks)
        level, index, merged = 0, self.size, leaf_hash
        completed = [StoredNode(0, index, leaf_hash)]
        # A right child (odd index) completes its parent with the last peak, its left sibling.
        while index & 1:
            merged = node_hash(peaks.pop(), merged)
            level, index = level + 1, index >> 1
            completed.append(StoredNode(level, index, merged))
        peaks.append(merged)
        return CompactRange(self.size + 1, tuple(peaks)), tuple(completed)

    def root(self) -> bytes:
        """MTH(D[0:size]): the peaks folded right to left (EMPTY_ROOT for no leaves)."""
        if not self.peaks:
            return EMPTY_ROOT
        folded = self.peaks[-1]
        for left in reversed(self.peaks[:-1]):
            folded = node_hash(left, folded)
        return folded
