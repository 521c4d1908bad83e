"""Inclusion and consistency proofs against the published vectors: transparency-dev/merkle's probes
(each must be accepted or refused as it says) and Certificate Transparency's generated proofs."""

from __future__ import annotations

from typing import Any

import pytest

from decisionflow.transparency import (
    CompactRange,
    InvalidTreeRange,
    MalformedHash,
    ProofError,
    StoredNode,
    SubtreeHash,
    WrongProofLength,
    WrongRoot,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_from_inclusion_proof,
    subtree_hashes_of_leaves,
    subtree_hashes_of_nodes,
    verify_consistency,
    verify_inclusion,
)
from tests.transparency.published import proof_of, unbase64, vectors

INCLUSION = vectors("inclusion_probes")["probes"]
CONSISTENCY = vectors("consistency_probes")["probes"]
TREE = vectors("reference_tree")
LEAF_HASHES = [leaf_hash(bytes.fromhex(data)) for data in TREE["leaves"]]


def _probe_id(probe: dict[str, Any]) -> str:
    return str(probe["file"]).removeprefix("testdata/").removesuffix(".json")


def _verify_inclusion(probe: dict[str, Any]) -> None:
    verify_inclusion(
        probe["leafIdx"], probe["treeSize"], unbase64(probe["leafHash"]), proof_of(probe), unbase64(probe["root"])
    )


def _verify_consistency(probe: dict[str, Any]) -> None:
    verify_consistency(
        probe["size1"], probe["size2"], proof_of(probe), unbase64(probe["root1"]), unbase64(probe["root2"])
    )


def test_the_probe_files_are_all_there() -> None:
    assert (len(INCLUSION), len(CONSISTENCY)) == (98, 98)
    assert sum(not p["wantErr"] for p in INCLUSION) == sum(not p["wantErr"] for p in CONSISTENCY) == 6


@pytest.mark.parametrize("probe", INCLUSION, ids=_probe_id)
def test_an_inclusion_probe_is_accepted_or_refused_as_published(probe: dict[str, Any]) -> None:
    if probe["wantErr"]:
        with pytest.raises(ProofError):
            _verify_inclusion(probe)
    else:
        _verify_inclusion(probe)


@pytest.mark.parametrize("probe", CONSISTENCY, ids=_probe_id)
def test_a_consistency_probe_is_accepted_or_refused_as_published(probe: dict[str, Any]) -> None:
    if probe["wantErr"]:
        with pytest.raises(ProofError):
            _verify_consistency(probe)
    else:
        _verify_consistency(probe)


def _probe(probes: list[dict[str, Any]], file: str) -> dict[str, Any]:
    [found] = [p for p in probes if p["file"] == f"testdata/{file}.json"]
    return found


@pytest.mark.parametrize(
    ("file", "error"),
    [
        ("inclusion/1/wrong-leaf", MalformedHash),
        ("inclusion/1/random-root", WrongRoot),
        ("inclusion/1/modified-proof[1]-bit-@3", WrongRoot),
        ("inclusion/1/trailing-garbage", WrongProofLength),
        ("inclusion/1/removed-component", WrongProofLength),
        ("inclusion/0/leafIdx-plus-@1", InvalidTreeRange),
        ("inclusion/additional/0/empty-root", InvalidTreeRange),
        ("inclusion/single-entry/empty-leaf", MalformedHash),
    ],
)
def test_a_refused_inclusion_probe_names_what_does_not_hold(file: str, error: type[ProofError]) -> None:
    with pytest.raises(error):
        _verify_inclusion(_probe(INCLUSION, file))


@pytest.mark.parametrize(
    ("file", "error"),
    [
        ("consistency/1/wrong-root1", WrongRoot),
        ("consistency/1/wrong-root2", WrongRoot),
        ("consistency/1/swapped-roots", WrongRoot),
        ("consistency/1/truncated-proof", WrongProofLength),
        ("consistency/1/preceding-garbage", WrongProofLength),
        ("consistency/additional/size1-is-greater-than-size2", InvalidTreeRange),
        ("consistency/additional/consistency-check-on-empty-tree-size1-is-zero-is-useless", InvalidTreeRange),
        ("consistency/additional/sizes-match-but-proof-is-not-empty-and-sizes-are-one", WrongProofLength),
        ("consistency/additional/sizes-are-equal-one-but-roots-are-not", WrongRoot),
    ],
)
def test_a_refused_consistency_probe_names_what_does_not_hold(file: str, error: type[ProofError]) -> None:
    with pytest.raises(error):
        _verify_consistency(_probe(CONSISTENCY, file))


def test_a_wrong_root_names_the_tree_size_and_both_roots() -> None:
    probe = _probe(CONSISTENCY, "consistency/1/wrong-root2")
    with pytest.raises(WrongRoot) as refused:
        _verify_consistency(probe)
    assert refused.value.tree_size == 8
    assert refused.value.expected == unbase64(probe["root2"])
    assert refused.value.computed.hex() == TREE["roots"]["8"]


def _stored_nodes() -> SubtreeHash:
    state, stored = CompactRange(), dict[tuple[int, int], bytes]()
    for leaf in LEAF_HASHES:
        state, completed = state.append(leaf)
        stored.update(((node.level, node.index), node.hash) for node in completed)
    assert all(isinstance(node, StoredNode) for node in completed)
    return subtree_hashes_of_nodes(lambda level, index: stored[level, index])


SOURCES = {"leaves": lambda: subtree_hashes_of_leaves(LEAF_HASHES), "stored nodes": _stored_nodes}


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("vector", TREE["inclusion"], ids=lambda v: f"{v['index']}@{v['size']}")
def test_inclusion_proofs_are_the_published_paths(vector: dict[str, Any], source: str) -> None:
    proof = inclusion_proof(vector["index"], vector["size"], SOURCES[source]())

    assert [node.hex() for node in proof] == vector["proof"]
    root = root_from_inclusion_proof(vector["index"], vector["size"], LEAF_HASHES[vector["index"]], proof)
    assert root.hex() == TREE["roots"][str(vector["size"])]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("vector", TREE["consistency"], ids=lambda v: f"{v['size1']}-{v['size2']}")
def test_consistency_proofs_are_the_published_proofs(vector: dict[str, Any], source: str) -> None:
    size1, size2 = vector["size1"], vector["size2"]
    proof = consistency_proof(size1, size2, SOURCES[source]())

    assert [node.hex() for node in proof] == vector["proof"]
    roots = TREE["roots"]
    verify_consistency(size1, size2, proof, bytes.fromhex(roots[str(size1)]), bytes.fromhex(roots[str(size2)]))


@pytest.mark.parametrize(("index", "size"), [(8, 8), (0, 0), (-1, 4)])
def test_no_inclusion_proof_is_made_for_a_leaf_outside_the_tree(index: int, size: int) -> None:
    with pytest.raises(InvalidTreeRange):
        inclusion_proof(index, size, subtree_hashes_of_leaves(LEAF_HASHES))


@pytest.mark.parametrize(("size1", "size2"), [(0, 3), (5, 3), (-1, 2)])
def test_no_consistency_proof_is_made_from_an_empty_or_larger_tree(size1: int, size2: int) -> None:
    with pytest.raises(InvalidTreeRange):
        consistency_proof(size1, size2, subtree_hashes_of_leaves(LEAF_HASHES))


def test_leaf_hashes_cannot_give_a_proof_beyond_the_leaves_they_hold() -> None:
    with pytest.raises(InvalidTreeRange):
        inclusion_proof(0, 9, subtree_hashes_of_leaves(LEAF_HASHES))
