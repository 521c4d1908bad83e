"""RFC 6962 / RFC 9162 hashing: SHA-256 with a one-byte prefix that tells a leaf from a node.

    leaf hash  = SHA-256(0x00 || data)
    node hash  = SHA-256(0x01 || left || right)
    MTH({})    = SHA-256("")
    MTH(D[n])  = node hash(MTH(D[0:k]), MTH(D[k:n])), k the largest power of two below n

The prefixes make a leaf never hash like a node (RFC 9162 §2.1.1), so no one can present an inner
node as a leaf, nor the other way round.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HASH_SIZE = 32
"""Bytes in a SHA-256 digest: every leaf hash, node hash and root."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""The root of the empty tree, MTH({}): SHA-256 of no bytes (no prefix)."""

_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"


def leaf_hash(data: bytes) -> bytes:
    """The hash of a leaf: SHA-256(0x00 || data)."""
    return hashlib.sha256(_LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an inner node: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


def split_point(size: int) -> int:
    """The largest power of two strictly below size (size ≥ 2): where MTH splits D[0:size]."""
    return 1 << ((size - 1).bit_length() - 1)


def tree_hash(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH of the leaves whose hashes are given, in order (EMPTY_ROOT for none)."""
    if not leaf_hashes:
        return EMPTY_ROOT
    # Bottom-up, level by level: pairing left to right and carrying an odd last node up unchanged
    # builds the same tree as the recursive split at the largest power of two (RFC 9162 §2.1.1).
    level = list(leaf_hashes)
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]
