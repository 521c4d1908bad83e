"""RFC 6962 hashing, tree roots and compact ranges against the published vectors (vectors/)."""

from __future__ import annotations

import hashlib

import pytest

from decisionflow.transparency import (
    EMPTY_ROOT,
    CompactRange,
    InvalidTreeRange,
    MalformedHash,
    StoredNode,
    leaf_hash,
    node_hash,
    perfect_subtrees,
    range_hash,
    tree_hash,
)
from tests.transparency.published import vectors

HASHING = vectors("hashing")
TREE = vectors("reference_tree")
LEAF_HASHES = [leaf_hash(bytes.fromhex(data)) for data in TREE["leaves"]]


@pytest.mark.parametrize("vector", HASHING["leaves"], ids=lambda v: v["data"] or "empty")
def test_a_leaf_hash_is_sha256_of_0x00_and_the_data(vector: dict[str, str]) -> None:
    assert leaf_hash(bytes.fromhex(vector["data"])).hex() == vector["hash"]


def test_a_node_hash_is_sha256_of_0x01_and_both_children() -> None:
    [vector] = HASHING["nodes"]
    assert node_hash(bytes.fromhex(vector["left"]), bytes.fromhex(vector["right"])).hex() == vector["hash"]
    assert node_hash(bytes.fromhex(vector["right"]), bytes.fromhex(vector["left"])).hex() != vector["hash"]


def test_the_empty_tree_root_is_sha256_of_nothing_and_not_the_empty_leaf() -> None:
    assert EMPTY_ROOT.hex() == HASHING["empty_tree"] == TREE["empty_root"]
    assert tree_hash([]) == EMPTY_ROOT == CompactRange().root()
    assert leaf_hash(b"") != EMPTY_ROOT


@pytest.mark.parametrize("size", range(1, 9))
def test_the_reference_tree_has_the_published_root_at_every_size(size: int) -> None:
    assert tree_hash(LEAF_HASHES[:size]).hex() == TREE["roots"][str(size)]


def test_appending_the_reference_leaves_gives_the_published_compact_ranges_and_roots() -> None:
    state = CompactRange()
    assert list(state.peaks) == TREE["compact_ranges"]["0"]
    for size, leaf in enumerate(LEAF_HASHES, start=1):
        state, _ = state.append(leaf)
        assert state.size == size
        assert [peak.hex() for peak in state.peaks] == TREE["compact_ranges"][str(size)]
        assert state.root().hex() == TREE["roots"][str(size)]


def test_appending_stores_each_published_node_hash_once_as_its_subtree_completes() -> None:
    state, stored = CompactRange(), list[StoredNode]()
    for leaf in LEAF_HASHES:
        state, completed = state.append(leaf)
        stored += completed

    published = [
        StoredNode(level, index, bytes.fromhex(value))
        for level, row in enumerate(TREE["node_hashes"])
        for index, value in enumerate(row)
    ]
    assert sorted(stored, key=lambda n: (n.level, n.index)) == published
    # The leaf first, then each parent it completes: leaf 7 completes [6, 8), [4, 8) and [0, 8).
    assert [(n.level, n.index) for n in completed] == [(0, 7), (1, 3), (2, 1), (3, 0)]


@pytest.mark.parametrize("size", range(9))
def test_a_compact_range_is_read_back_from_the_stored_nodes(size: int) -> None:
    nodes = TREE["node_hashes"]
    state = CompactRange.at_size(size, lambda level, index: bytes.fromhex(nodes[level][index]))
    assert [peak.hex() for peak in state.peaks] == TREE["compact_ranges"][str(size)]


def test_the_hash_of_a_tree_node_folds_its_perfect_subtrees_from_the_right() -> None:
    nodes = TREE["node_hashes"]

    def read_node(level: int, index: int) -> bytes:
        return bytes.fromhex(nodes[level][index])

    # [0, 7): the perfect subtrees [0, 4), [4, 6), [6, 7); the root of size 7.
    assert perfect_subtrees(0, 7) == ((2, 0), (1, 2), (0, 6))
    assert range_hash(0, 7, read_node).hex() == TREE["roots"]["7"]
    # [4, 7) is the right child of the root of size 7: MTH(D[4:7]).
    assert range_hash(4, 7, read_node) == tree_hash(LEAF_HASHES[4:7])
    assert range_hash(4, 8, read_node).hex() == nodes[2][1]


@pytest.mark.parametrize(("start", "end"), [(1, 3), (2, 5), (3, 3), (4, 2), (6, 9)])
def test_range_hash_refuses_leaves_that_are_not_one_node_of_a_tree(start: int, end: int) -> None:
    with pytest.raises(InvalidTreeRange):
        range_hash(start, end, lambda level, index: b"\x00" * 32)


def test_a_compact_range_refuses_peaks_that_do_not_fit_its_size_and_leaf_hashes_of_another_length() -> None:
    with pytest.raises(InvalidTreeRange):
        CompactRange(3, (EMPTY_ROOT,))
    with pytest.raises(MalformedHash):
        CompactRange(1, (b"short",))
    with pytest.raises(MalformedHash):
        CompactRange().append(hashlib.sha1(b"leaf").digest())
