"""A second Merkle tree, written from RFC 9162 §2.1 alone, for the property tests.

It shares no code with decisionflow.transparency: MTH, PATH and PROOF are the RFC's recursive
definitions over the leaf data, with the prefixes hashed by hashlib here; the product builds proofs
iteratively from subtree hashes and verifies them with the RFC's bit-shifting algorithms. Each
proof hash comes with the leaf range [start, end) it is the MTH of.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache

Range = tuple[int, int]


def _largest_power_of_two_below(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


class ReferenceTree:
    """The Merkle tree of the given leaf data, every MTH computed once."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        self.leaves = list(leaves)
        self.mth = cache(self._mth)

    def _mth(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) by the RFC's recursion."""
        n = end - start
        if n == 0:
            return hashlib.sha256(b"").digest()
        if n == 1:
            return hashlib.sha256(b"\x00" + self.leaves[start]).digest()
        k = _largest_power_of_two_below(n)
        return hashlib.sha256(b"\x01" + self.mth(start, start + k) + self.mth(start + k, end)).digest()

    def root(self, size: int) -> bytes:
        """MTH(D[0:size])."""
        return self.mth(0, size)

    def path(self, m: int, size: int) -> list[Range]:
        """PATH(m, D[0:size]) as the ranges of its hashes."""
        return _path(m, 0, size)

    def proof(self, m: int, size: int) -> list[Range]:
        """PROOF(m, D[0:size]) as the ranges of its hashes."""
        return _subproof(m, 0, size, True)

    def hashes(self, ranges: list[Range]) -> list[bytes]:
        """The MTH of each range."""
        return [self.mth(start, end) for start, end in ranges]


def _path(m: int, start: int, end: int) -> list[Range]:
    n = end - start
    if n == 1:
        return []
    k = _largest_power_of_two_below(n)
    if m < k:
        return [*_path(m, start, start + k), (start + k, end)]
    return [*_path(m - k, start + k, end), (start, start + k)]


def _subproof(m: int, start: int, end: int, b: bool) -> list[Range]:
    n = end - start
    if m == n:
        return [] if b else [(start, end)]
    k = _largest_power_of_two_below(n)
    if m <= k:
        return [*_subproof(m, start, start + k, b), (start + k, end)]
    return [*_subproof(m - k, start + k, end, False), (start, start + k)]


def inclusion_shape(index: int, size: int) -> tuple[bool, ...] | None:
    """Which proof hashes are left siblings of the leaf's path (None: no such proof).

    A verifier combines the proof hashes in this order and on these sides; two (index, size)
    pairs of the same shape compute the same root from the same hashes, so a proof cannot tell
    them apart (the signed checkpoint binds the size).
    """
    if not 0 <= index < size:
        return None
    return tuple(end <= index for _, end in _path(index, 0, size))


def consistency_shape(size1: int, size2: int) -> tuple[bool, ...] | None:
    """Whether the first root starts the proof, then which proof hashes lie in the first tree (None: no proof)."""
    if not 0 < size1 <= size2:
        return None
    power_of_two = size1 & (size1 - 1) == 0
    return (power_of_two, *(end <= size1 for _, end in _subproof(size1, 0, size2, True)))
