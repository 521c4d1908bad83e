"""docs/audit-log.md stays true: its worked example is the published reference tree, its signed
checkpoint is what an independent signer (note_reference) writes and what the product opens, and
its Python snippet runs."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from decisionflow.transparency import NoteVerifier, RerouteLeaf, encode_leaf, leaf_hash, open_checkpoint
from tests.transparency import note_reference
from tests.transparency.published import vectors
from tests.transparency.test_leaves import TWO_STAGES, proposal

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "audit-log.md").read_text(encoding="utf-8")
TREE = vectors("reference_tree")
NAME = "example.com/reference-tree"


def _block(starting: str) -> str:
    found = re.search(rf"```\n({re.escape(starting)}.*?)```", PAGE, re.DOTALL)
    assert found is not None, starting
    return found.group(1)


def test_every_hash_on_the_page_is_a_published_one_or_the_examples_key() -> None:
    published = {*TREE["roots"].values(), TREE["empty_root"], *(h for level in TREE["node_hashes"] for h in level)}
    seed = bytes.fromhex(re.findall(r"Ed25519\nseed `([0-9a-f]{64})`", PAGE)[0])
    key = note_reference.public_key(seed).hex()

    # The "Leaves" section's vector: a leaf's bytes as printed, and its hash computed here.
    leaf_block = _block("0000001a")
    leaf_vector = hashlib.sha256(b"\x00" + bytes.fromhex("".join(leaf_block.split()))).hexdigest()
    on_page = set(re.findall(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])", PAGE.replace(leaf_block, "")))

    # The proposal leaf with a rule: its hash, computed from the leaf its vector test builds.
    example = proposal()
    rule_vector = leaf_hash(encode_leaf(proposal(rule=TWO_STAGES))).hex()
    # The reroute leaves of the same operation, to the default rule and to the two-stage rule.
    reroutes = {
        leaf_hash(encode_leaf(RerouteLeaf(example.recorded_at, example.operation_id, example.action, rule))).hex()
        for rule in (None, TWO_STAGES)
    }

    assert on_page - published == {seed.hex(), key, leaf_vector, rule_vector, *reroutes}
    rows = re.findall(r"^\| (\d) \| (?:`([0-9a-f]+)`|\(none\)) \| `([0-9a-f]{64})` \|$", PAGE, re.MULTILINE)
    assert [(int(i), data, hashed) for i, data, hashed in rows] == [
        (i, data, hashed) for i, (data, hashed) in enumerate(zip(TREE["leaves"], TREE["node_hashes"][0], strict=True))
    ]


def test_the_signed_checkpoint_is_the_independent_signers_and_opens_with_the_verifier_key() -> None:
    seed = bytes.fromhex(re.findall(r"Ed25519\nseed `([0-9a-f]{64})`", PAGE)[0])
    vkey = _block(NAME + "+").strip()
    signed = _block(NAME + "\n")
    text = signed[: signed.index("\n\n") + 1]

    checkpoint = open_checkpoint(signed, [NoteVerifier.from_vkey(vkey)], origin=NAME)

    assert vkey == note_reference.vkey(NAME, seed)
    assert note_reference.key_id(NAME, seed).hex() in PAGE
    assert signed == note_reference.signed_note(text, NAME, seed)
    assert (checkpoint.size, checkpoint.root_hash.hex()) == (8, TREE["roots"]["8"])
    # The seed is the published test key of Go's note package (PRIVATE+KEY+name+keyid+base64(0x01 || seed)).
    skey = vectors("notes")["go_note"]["peter_skey"]
    assert base64.b64decode(skey.split("+", 4)[4]) == b"\x01" + seed


def test_the_python_snippet_runs_on_the_signed_checkpoint() -> None:
    snippet = re.search(r"```python\n(.*?)```", PAGE, re.DOTALL)
    assert snippet is not None
    namespace: dict[str, object] = {"signed_note": _block(NAME + "\n")}
    exec(snippet.group(1), namespace)
    assert "checkpoint" in namespace
