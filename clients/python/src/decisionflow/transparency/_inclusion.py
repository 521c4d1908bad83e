"""Inclusion proofs (RFC 9162 §2.1.3): the leaf at index is in the tree of size leaves with that root.

Generation follows PATH(m, D[n]) (§2.1.3.1): for n > 1 and k the largest power of two below n,

    PATH(m, D[n]) = PATH(m, D[0:k]) : MTH(D[k:n])      if m < k
    PATH(m, D[n]) = PATH(m - k, D[k:n]) : MTH(D[0:k])  if m ≥ k

so the proof lists the siblings from the leaf's up to the root's children. Verification is the
algorithm of §2.1.3.2, after checks of the shape that name what is wrong before any hashing.
"""

from __future__ import annotations

from collections.abc import Sequence

from decisionflow.transparency._errors import InvalidTreeRange, MalformedHash, ProofError, WrongProofLength, WrongRoot
from decisionflow.transparency._hashing import HASH_SIZE, node_hash, split_point
from decisionflow.transparency._subtrees import SubtreeHash


def inclusion_ranges(index: int, size: int) -> tuple[tuple[int, int], ...]:
    """The leaf ranges [start, end) whose MTH make up the inclusion proof, in proof order."""
    _check_index(index, size)
    ranges = []
    start, end = 0, size
    while end - start > 1:
        middle = start + split_point(end - start)
        if index < middle:
            ranges.append((middle, end))
            end = middle
        else:
            ranges.append((start, middle))
            start = middle
    # Collected from the root down; the proof starts at the leaf.
    return tuple(reversed(ranges))


def inclusion_proof(index: int, size: int, subtree_hash: SubtreeHash) -> list[bytes]:
    """The inclusion proof of the leaf at index in the tree of size leaves (RFC 9162 PATH)."""
    return [subtree_hash(start, end) for start, end in inclusion_ranges(index, size)]


def inclusion_proof_length(index: int, size: int) -> int:
    """How many hashes the inclusion proof of the leaf at index in a tree of size leaves has."""
    _check_index(index, size)
    # Below the level where the paths to index and to the last leaf part, every level gives one
    # sibling; above it, only the levels where index's ancestor is a right child do.
    inner = (index ^ (size - 1)).bit_length()
    return inner + (index >> inner).bit_count()


def root_from_inclusion_proof(index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes]) -> bytes:
    """The root the proof leads to from the leaf hash at index in a tree of size leaves."""
    expected = inclusion_proof_length(index, size)
    if len(proof) != expected:
        raise WrongProofLength(expected, len(proof))
    if len(leaf_hash) != HASH_SIZE:
        raise MalformedHash("the leaf hash", len(leaf_hash))
    for position, sibling in enumerate(proof):
        if len(sibling) != HASH_SIZE:
            raise MalformedHash(f"proof hash {position}", len(sibling))
    # RFC 9162 §2.1.3.2, steps 2 to 6. After the length check its two sn checks cannot fail; they
    # stay as the RFC states them, so a mistake in the length would still never pass a proof.
    fn, sn, computed = index, size - 1, leaf_hash
    for sibling in proof:
        if sn == 0:
            raise ProofError(f"the proof does not fit a tree of {size} leaves")
        if fn & 1 or fn == sn:
            computed = node_hash(sibling, computed)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            computed = node_hash(computed, sibling)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError(f"the proof does not fit a tree of {size} leaves")
    return computed


def verify_inclusion(index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Return if the leaf hash is at index in the tree of size leaves whose root is root; raise otherwise."""
    computed = root_from_inclusion_proof(index, size, leaf_hash, proof)
    if computed != root:
        raise WrongRoot(size, root, computed)


def _check_index(index: int, size: int) -> None:
    if not 0 <= index < size:
        raise InvalidTreeRange(f"no leaf {index} in a tree of {size} leaves")
