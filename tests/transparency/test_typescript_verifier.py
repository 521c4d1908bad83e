"""The TypeScript client's inclusion proof verifier (clients/typescript/src/transparency.ts) against
the same published vectors as the Python one, and against proofs the Python log side makes."""

from __future__ import annotations

import json
import random
import subprocess
from typing import Any

import pytest

from decisionflow.transparency import inclusion_proof, leaf_hash, subtree_hashes_of_leaves, tree_hash
from tests.support.typescript import TypeScriptPackage
from tests.transparency.published import VECTORS, vectors

# Reads the probes (transparency-dev's base64 fields) from a file and the cases from stdin (hex),
# and prints, for each, the name of the error thrown or null.
SCRIPT = """
import { readFileSync } from "node:fs";
import { leafHash, verifyInclusion } from "./dist/src/index.js";
const [probesFile] = process.argv.slice(1);
const b64 = (value) => new Uint8Array(Buffer.from(value ?? "", "base64"));
const hex = (value) => new Uint8Array(Buffer.from(value, "hex"));
const outcome = (check) => { try { check(); return null; } catch (error) { return error.name; } };
const probes = JSON.parse(readFileSync(probesFile, "utf8")).probes;
const cases = JSON.parse(readFileSync(0, "utf8"));
console.log(JSON.stringify({
  probes: probes.map((p) => [p.file, outcome(() => verifyInclusion(
    p.leafIdx, p.treeSize, b64(p.leafHash), (p.proof ?? []).map(b64), b64(p.root)))]),
  leafHashes: cases.leaves.map((data) => Buffer.from(leafHash(hex(data))).toString("hex")),
  proofs: cases.proofs.map((c) => outcome(() => verifyInclusion(
    BigInt(c.index), BigInt(c.size), hex(c.leaf), c.proof.map(hex), hex(c.root)))),
}));
"""


@pytest.mark.slow  # npm ci and tsc on a first run
def test_the_typescript_verifier_agrees_with_the_published_vectors_and_the_python_log(
    typescript_package: TypeScriptPackage,
) -> None:
    tree = vectors("reference_tree")
    chance = random.Random(20)
    leaves = [chance.randbytes(chance.randrange(40)) for _ in range(300)]
    hashes = [leaf_hash(leaf) for leaf in leaves]
    subtrees = subtree_hashes_of_leaves(hashes)
    proofs: list[dict[str, object]] = []
    expected: list[str | None] = []
    for size in (1, 2, 3, 7, 8, 100, 255, 256, 257, 300):
        root = tree_hash(hashes[:size])
        for index in sorted({0, size // 2, size - 1}):
            proof = [node.hex() for node in inclusion_proof(index, size, subtrees)]
            honest: dict[str, object] = {
                "index": index,
                "size": size,
                "leaf": hashes[index].hex(),
                "proof": proof,
                "root": root.hex(),
            }
            proofs.append(honest)
            expected.append(None)
            if proof:
                flipped = proof[-1][:-1] + ("1" if proof[-1][-1] == "0" else "0")
                proofs.append({**honest, "proof": [*proof[:-1], flipped]})
                expected.append("WrongRoot")
            proofs.append({**honest, "index": size})
            expected.append("InvalidTreeRange")

    done = _run_node(typescript_package, {"leaves": tree["leaves"], "proofs": proofs})

    published = {probe["file"]: probe["wantErr"] for probe in vectors("inclusion_probes")["probes"]}
    told = {str(file): error for file, error in done["probes"]}
    assert sorted(told) == sorted(published)
    assert {file: error is not None for file, error in told.items()} == published
    assert told["testdata/inclusion/1/random-root.json"] == "WrongRoot"
    assert told["testdata/inclusion/1/wrong-leaf.json"] == "MalformedHash"
    assert told["testdata/inclusion/1/trailing-garbage.json"] == "WrongProofLength"
    assert told["testdata/inclusion/0/leafIdx-sub-@1.json"] == "InvalidTreeRange"
    assert done["leafHashes"] == tree["node_hashes"][0]
    assert done["proofs"] == expected


def _run_node(package: TypeScriptPackage, cases: dict[str, object]) -> dict[str, list[Any]]:
    done = subprocess.run(
        [package.node, "--input-type=module", "-e", SCRIPT, str(VECTORS / "inclusion_probes.json")],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=package.folder,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    answer: dict[str, list[Any]] = json.loads(done.stdout)
    return answer
