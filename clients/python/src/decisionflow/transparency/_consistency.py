"""Consistency proofs (RFC 9162 §2.1.4): the tree of size2 leaves extends the tree of size1 leaves.

Generation follows PROOF(m, D[n]) = SUBPROOF(m, D[n], true) (§2.1.4.1): for m < n and k the
largest power of two below n,

    SUBPROOF(m, D[m], true)  = {}
    SUBPROOF(m, D[m], false) = {MTH(D[m])}
    SUBPROOF(m, D[n], b)     = SUBPROOF(m, D[0:k], b) : MTH(D[k:n])          if m ≤ k
    SUBPROOF(m, D[n], b)     = SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])  if m > k

Verification is the algorithm of §2.1.4.2. Two trees of the same size are consistent when their
roots are equal (the proof is empty); a proof from the empty tree is refused, as it proves nothing
(every tree extends the empty one) and RFC 9162 defines none.
"""

from __future__ import annotations

from collections.abc import Sequence

from decisionflow.transparency._errors import InvalidTreeRange, MalformedHash, ProofError, WrongProofLength, WrongRoot
from decisionflow.transparency._hashing import HASH_SIZE, node_hash, split_point
from decisionflow.transparency._subtrees import SubtreeHash


def consistency_ranges(size1: int, size2: int) -> tuple[tuple[int, int], ...]:
    """The leaf ranges [start, end) whose MTH make up the consistency proof, in proof order."""
    _check_sizes(size1, size2)
    ranges = []
    start, end, remaining, whole = 0, size2, size1, True
    while remaining != end - start:
        middle = start + split_point(end - start)
        if remaining <= middle - start:
            ranges.append((middle, end))
            end = middle
        else:
            ranges.append((start, middle))
            remaining -= middle - start
            start, whole = middle, False
    if not whole:
        ranges.append((start, end))
    # Collected from the root down; the proof starts with the deepest subtree.
    return tuple(reversed(ranges))


def consistency_proof(size1: int, size2: int, subtree_hash: SubtreeHash) -> list[bytes]:
    """The consistency proof from the tree of size1 leaves to the tree of size2 (RFC 9162 PROOF)."""
    return [subtree_hash(start, end) for start, end in consistency_ranges(size1, size2)]


def consistency_proof_length(size1: int, size2: int) -> int:
    """How many hashes the consistency proof from size1 to size2 leaves has."""
    _check_sizes(size1, size2)
    if size1 == size2:
        return 0
    # The inclusion path of leaf size1 - 1 in the tree of size2, less the levels inside the
    # rightmost perfect subtree of the first tree, plus that subtree's own hash unless it is the
    # whole first tree (then the verifier already has it: the first root).
    last = size1 - 1
    inner = (last ^ (size2 - 1)).bit_length()
    border = (last >> inner).bit_count()
    shift = (size1 & -size1).bit_length() - 1
    return inner - shift + border + (0 if size1 == 1 << shift else 1)


def verify_consistency(size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes) -> None:
    """Return if the tree of size2 leaves and root2 extends the tree of size1 leaves and root1; raise otherwise."""
    expected = consistency_proof_length(size1, size2)
    if len(proof) != expected:
        raise WrongProofLength(expected, len(proof))
    for position, node in enumerate(proof):
        if len(node) != HASH_SIZE:
            raise MalformedHash(f"proof hash {position}", len(node))
    if size1 == size2:
        if root1 != root2:
            raise WrongRoot(size2, root2, root1)
        return
    first, second = _roots(size1, size2, proof, root1)
    if first != root1:
        raise WrongRoot(size1, root1, first)
    if second != root2:
        raise WrongRoot(size2, root2, second)


def _roots(size1: int, size2: int, proof: Sequence[bytes], root1: bytes) -> tuple[bytes, bytes]:
    # RFC 9162 §2.1.4.2, steps 2 to 7. After the length check its sn checks cannot fail; they
    # stay as the RFC states them, so a mistake in the length would still never pass a proof.
    path = [root1, *proof] if size1 & (size1 - 1) == 0 else list(proof)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for node in path[1:]:
        if sn == 0:
            raise ProofError(f"the proof does not fit trees of {size1} and {size2} leaves")
        if fn & 1 or fn == sn:
            fr = node_hash(node, fr)
            sr = node_hash(node, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, node)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError(f"the proof does not fit trees of {size1} and {size2} leaves")
    return fr, sr


def _check_sizes(size1: int, size2: int) -> None:
    if not 0 <= size1 <= size2:
        raise InvalidTreeRange(f"a tree of {size2} leaves cannot extend one of {size1}")
    if size1 == 0:
        raise InvalidTreeRange("a consistency proof from the empty tree proves nothing")
