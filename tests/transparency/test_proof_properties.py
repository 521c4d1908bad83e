"""Properties of random trees (1 to 300 leaves), the product checked against the RFC's recursion
(merkle_reference): every proof verifies and is the RFC's, and a flipped bit in a leaf, a proof
hash, a root or a size is refused, unless the flipped size names a tree the proof cannot tell apart."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from decisionflow.transparency import (
    CompactRange,
    ProofError,
    consistency_proof,
    consistency_proof_length,
    inclusion_proof,
    inclusion_proof_length,
    leaf_hash,
    subtree_hashes_of_leaves,
    subtree_hashes_of_nodes,
    tree_hash,
    verify_consistency,
    verify_inclusion,
)
from tests.transparency.merkle_reference import ReferenceTree, consistency_shape, inclusion_shape

MAX_SIZE = 300


@st.composite
def trees(draw: st.DrawFn) -> ReferenceTree:
    """A tree of 1 to 300 distinct leaves of random bytes, small sizes and powers of two often."""
    size = draw(st.one_of(st.integers(1, 9), st.sampled_from([16, 31, 32, 33, 64, 127, 128, 255, 256]),
                          st.integers(1, MAX_SIZE)))  # fmt: skip
    salt = draw(st.binary(max_size=6))
    return ReferenceTree([salt + index.to_bytes(2, "big") for index in range(size)])


def _flip(data: bytes, bit: int) -> bytes:
    bit %= len(data) * 8
    flipped = bytearray(data)
    flipped[bit // 8] ^= 1 << (bit % 8)
    return bytes(flipped)


def _refused(check: object, *args: object) -> bool:
    try:
        check(*args)  # type: ignore[operator]
    except ProofError:
        return True
    return False


@settings(max_examples=60, deadline=None)
@given(trees(), st.data())
def test_every_inclusion_proof_verifies_and_is_the_rfcs_path(tree: ReferenceTree, data: st.DataObject) -> None:
    size = len(tree.leaves)
    smaller = data.draw(st.integers(1, size), label="an earlier size")
    hashes = subtree_hashes_of_leaves([leaf_hash(leaf) for leaf in tree.leaves])
    for tree_size in {size, smaller}:
        root = tree.root(tree_size)
        assert tree_hash([leaf_hash(leaf) for leaf in tree.leaves[:tree_size]]) == root
        for index in range(tree_size):
            proof = inclusion_proof(index, tree_size, hashes)
            assert proof == tree.hashes(tree.path(index, tree_size))
            assert len(proof) == inclusion_proof_length(index, tree_size)
            verify_inclusion(index, tree_size, leaf_hash(tree.leaves[index]), proof, root)


@settings(max_examples=60, deadline=None)
@given(trees())
def test_every_consistency_proof_verifies_and_is_the_rfcs_proof(tree: ReferenceTree) -> None:
    size = len(tree.leaves)
    hashes = subtree_hashes_of_leaves([leaf_hash(leaf) for leaf in tree.leaves])
    for size1 in range(1, size + 1):
        proof = consistency_proof(size1, size, hashes)
        assert proof == tree.hashes(tree.proof(size1, size))
        assert len(proof) == consistency_proof_length(size1, size)
        verify_consistency(size1, size, proof, tree.root(size1), tree.root(size))


@settings(max_examples=40, deadline=None)
@given(trees())
def test_stored_nodes_give_every_root_and_the_same_proofs_as_the_leaves(tree: ReferenceTree) -> None:
    state, stored = CompactRange(), dict[tuple[int, int], bytes]()
    for size, leaf in enumerate(tree.leaves, start=1):
        state, completed = state.append(leaf_hash(leaf))
        stored.update(((node.level, node.index), node.hash) for node in completed)
        assert state.root() == tree.root(size)
    assert len(stored) == 2 * len(tree.leaves) - len(tree.leaves).bit_count()

    def read_node(level: int, index: int) -> bytes:
        return stored[level, index]

    from_nodes = subtree_hashes_of_nodes(read_node)
    from_leaves = subtree_hashes_of_leaves([leaf_hash(leaf) for leaf in tree.leaves])
    size = len(tree.leaves)
    for smaller in range(1, size + 1):
        assert CompactRange.at_size(smaller, read_node).root() == tree.root(smaller)
        assert consistency_proof(smaller, size, from_nodes) == consistency_proof(smaller, size, from_leaves)
        index = (smaller * 7919) % size
        assert inclusion_proof(index, smaller if index < smaller else size, from_nodes) == inclusion_proof(
            index, smaller if index < smaller else size, from_leaves
        )


@settings(max_examples=300, deadline=None)
@given(trees(), st.data())
def test_a_flipped_bit_makes_an_inclusion_proof_fail(tree: ReferenceTree, data: st.DataObject) -> None:
    size = len(tree.leaves)
    index = data.draw(st.integers(0, size - 1), label="index")
    proof = tree.hashes(tree.path(index, size))
    leaf, root = tree.leaves[index], tree.root(size)
    part = data.draw(st.sampled_from(["proof", "leaf", "root", "size", "index"][0 if proof else 1 :]), label="part")
    bit = data.draw(st.integers(0, 8 * 32 - 1), label="bit")

    if part == "leaf":
        assert _refused(verify_inclusion, index, size, leaf_hash(_flip(leaf + b"\x00", bit)), proof, root)
        assert _refused(verify_inclusion, index, size, _flip(leaf_hash(leaf), bit), proof, root)
    elif part == "proof":
        position = data.draw(st.integers(0, len(proof) - 1), label="proof hash")
        damaged = [*proof[:position], _flip(proof[position], bit), *proof[position + 1 :]]
        assert _refused(verify_inclusion, index, size, leaf_hash(leaf), damaged, root)
    elif part == "root":
        assert _refused(verify_inclusion, index, size, leaf_hash(leaf), proof, _flip(root, bit))
    else:
        # A size or index of the same shape combines the same hashes on the same sides: the proof
        # holds for it too (only the signed checkpoint binds the size); any other must fail.
        flipped = 1 << bit % 10
        other_index, other_size = (index ^ flipped, size) if part == "index" else (index, size ^ flipped)
        same_shape = inclusion_shape(other_index, other_size) == inclusion_shape(index, size)
        refused = _refused(verify_inclusion, other_index, other_size, leaf_hash(leaf), proof, root)
        assert refused != same_shape


@settings(max_examples=300, deadline=None)
@given(trees(), st.data())
def test_a_flipped_bit_makes_a_consistency_proof_fail(tree: ReferenceTree, data: st.DataObject) -> None:
    size2 = len(tree.leaves)
    size1 = data.draw(st.integers(1, size2), label="size1")
    proof = tree.hashes(tree.proof(size1, size2))
    root1, root2 = tree.root(size1), tree.root(size2)
    part = data.draw(st.sampled_from(["proof", "root1", "root2", "size1", "size2"][0 if proof else 1 :]), label="part")
    bit = data.draw(st.integers(0, 8 * 32 - 1), label="bit")

    if part == "proof":
        position = data.draw(st.integers(0, len(proof) - 1), label="proof hash")
        damaged = [*proof[:position], _flip(proof[position], bit), *proof[position + 1 :]]
        assert _refused(verify_consistency, size1, size2, damaged, root1, root2)
    elif part == "root1":
        assert _refused(verify_consistency, size1, size2, proof, _flip(root1, bit), root2)
    elif part == "root2":
        assert _refused(verify_consistency, size1, size2, proof, root1, _flip(root2, bit))
    else:
        flipped = 1 << bit % 10
        other1, other2 = (size1 ^ flipped, size2) if part == "size1" else (size1, size2 ^ flipped)
        same_shape = consistency_shape(other1, other2) == consistency_shape(size1, size2)
        refused = _refused(verify_consistency, other1, other2, proof, root1, root2)
        assert refused != same_shape
