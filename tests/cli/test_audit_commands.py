"""``decisionflow audit export`` against a real orchestrator with authentication on, whose AuditService reads
an in-memory log of the leaves of its real operations (tests.support.audit_log), and ``decisionflow audit
verify`` with no service at all: a good bundle passes and says what it proved; every tampering is caught
and the first checkpoint, leaf or record that does not hold is named, with its exit status."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from decisionflow.transparency import Checkpoint, DecisionLeaf, sign_checkpoint
from decisionflow.v1 import review_pb2
from decisionflow_server.runtime.auth import bearer_metadata
from decisionflow_server.storage import db
from tests.support.audit_log import (
    AT,
    InMemoryAuditLog,
    decision_leaf,
    effect_leaf,
    proposal_leaf,
    sample_proposal,
    signer_for,
)
from tests.support.review_cli import Cli, proposal_file

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


@dataclass
class Audited:
    """A stack whose log holds its three operations' leaves, checkpoints at 4 and 6, and files to verify with."""

    cli: Cli
    approved: str
    declined: str
    pending: str
    key_file: Path
    older: Path  # the checkpoint signed at 4, as an auditor kept it
    directory: Path


def run(cli: Cli, *args: str, principal: str | None = None) -> tuple[int, str, str]:
    """Run ``decisionflow audit ARGS`` in process (as principal, against the stack, when one is given)."""
    return cli.raw("audit", *args, principal=principal)


def _operation(cli: Cli, operation_id: str) -> tuple[review_pb2.Proposal, review_pb2.Operation]:
    metadata = bearer_metadata(cli.tokens["ops"].read_text().strip())
    found = cli.stack.review().GetProposal(
        review_pb2.GetProposalRequest(operation_id=operation_id), metadata=metadata, timeout=10
    )
    return found.proposal, found.operation


@pytest.fixture
def audited(make_cli: Callable[..., Cli], tmp_path: Path) -> Audited:
    # The servicer serves a log of the leaves of these real operations, appended below (a fake at its
    # seam): the bundle's checks then meet exactly the leaves each test tampers with.
    cli = make_cli(audit_log=InMemoryAuditLog())
    ids = []
    for case_id in ("T-1", "T-2", "T-3"):
        run_ = cli("start", str(proposal_file(tmp_path, case_id)), principal="ava")
        assert run_.exit_code == 0, run_.stderr
        ids.append(str(run_.document["operation_id"]))
    approved, declined, pending = ids
    assert cli("approve", approved).exit_code == 0
    assert cli("decline", declined).exit_code == 0
    log = cli.stack.fake_audit_log()
    (p1, o1), (p2, o2), (p3, _) = (_operation(cli, operation_id) for operation_id in ids)
    for leaf in (proposal_leaf(p1), decision_leaf(o1), effect_leaf(o1), proposal_leaf(p2)):
        log.append(leaf)
    older = tmp_path / "checkpoint-4.txt"
    older.write_text(log.sign().signed_note)
    log.append(decision_leaf(o2))
    log.append(proposal_leaf(p3))
    log.sign()
    key_file = tmp_path / "log.vkey"
    key_file.write_text(log.vkey + "\n")
    return Audited(cli, approved, declined, pending, key_file, older, tmp_path)


def export(audited: Audited, name: str, *scope: str, principal: str = "audrey") -> dict[str, Any]:
    """Export a bundle to name; return it as JSON."""
    path = audited.directory / name
    exit_code, _, err = run(audited.cli, "export", *scope, "--out", str(path), principal=principal)
    assert exit_code == 0, err
    document = json.loads(path.read_text())
    assert isinstance(document, dict)
    return document


def verify(audited: Audited, bundle: dict[str, Any] | Path, *extra: str) -> tuple[int, str, str]:
    """Verify a bundle (a document is written to a file first) with the log's key and no service."""
    path = bundle if isinstance(bundle, Path) else audited.directory / "checked.json"
    if not isinstance(bundle, Path):
        path.write_text(json.dumps(bundle))
    return run(audited.cli, "verify", str(path), "--public-key", str(audited.key_file), *extra)


def test_an_operations_bundle_verifies_and_says_what_it_proved(audited: Audited) -> None:
    bundle = export(audited, "approved.json", "--operation", audited.approved)

    exit_code, out, err = verify(audited, audited.directory / "approved.json")

    assert (exit_code, err) == (0, "")
    assert bundle["scope"] == {"operation_id": audited.approved}
    assert [leaf["index"] for leaf in bundle["leaves"]] == [0, 1, 2]
    assert bundle["records"] == [
        {
            "operation_id": audited.approved,
            "found": True,
            "state": "COMMITTED",
            "decision": "APPROVE",
            "reviewer": "rita",
            "receipt_id": bundle["records"][0]["receipt_id"],
        }
    ]
    lines = out.splitlines()
    assert lines[0].startswith(f"verified checkpoint 6 of {audited.cli.stack.fake_audit_log().origin}, root ")
    assert lines[1:] == [
        f"trusted origin {audited.cli.stack.fake_audit_log().origin}: taken from the bundle, not pinned (pin it with "
        "--origin)",
        f"scope: operation {audited.approved}",
        "3 leaves, each proven included",
        "1 decision, 1 effect, 1 proposal; 1 operation(s), each proposal yields its id, decisions follow them",
        "1 orchestrator record(s) agree with the log, one for each operation of the scope (decision, reviewer and "
        "logged receipt, as exported)",
    ]


def test_a_whole_log_bundle_with_since_proves_the_root_and_the_consistency(audited: Audited) -> None:
    export(audited, "all.json", "--all", "--since", str(audited.older))
    case = export(audited, "case.json", "--case", "T-2", principal="ops")

    exit_code, out, err = verify(audited, audited.directory / "all.json", "--since", str(audited.older), "--json")
    case_code, _, case_err = verify(audited, case)

    assert (exit_code, err, case_code, case_err) == (0, "", 0, "")
    proved = json.loads(out)
    assert proved["verified"] and proved["whole_log"] and proved["leaves"] == proved["tree_size"] == 6
    assert proved["kinds"] == {"proposal": 3, "decision": 2, "effect": 1}
    assert (proved["since_size"], proved["records"], proved["operations"]) == (4, 3, 3)
    assert [leaf["index"] for leaf in case["leaves"]] == [3, 4]


def test_a_decision_edited_in_the_database_no_longer_matches_its_leaf(audited: Audited) -> None:
    engine = db.create_engine(audited.cli.stack.orchestrator_url, pool_size=1)
    try:
        with engine.begin() as conn:
            edited = conn.execute(
                sa.text("UPDATE decisions SET reviewer = 'mallory' WHERE operation_id = :id"), {"id": audited.approved}
            )
            assert edited.rowcount == 1
    finally:
        engine.dispose()
    bundle = export(audited, "edited.json", "--operation", audited.approved)

    exit_code, _, err = verify(audited, bundle, "--json")

    assert bundle["records"][0]["reviewer"] == "mallory"
    assert exit_code == 1
    assert err.startswith("decisionflow audit: leaf 1 does not hold: the orchestrator now records APPROVE by 'mallory'")


def _rebuilt(bundle: dict[str, Any], log: InMemoryAuditLog, keep: int = 0) -> dict[str, Any]:
    """The bundle of log's whole tree as an exporter would write it, keeping the first keep leaves of bundle."""
    size = log.size
    leaves = [
        {
            "index": leaf.index,
            "data": base64.b64encode(leaf.data).decode(),
            "proof": [base64.b64encode(h).decode() for h in log.inclusion_proof(leaf.index, size)],
        }
        for leaf in log.leaves(0, size)
    ]
    forged = copy.deepcopy(bundle)
    forged["leaves"] = bundle["leaves"][:keep] + leaves[keep:]
    return forged


def _forged_log(
    audited: Audited, bundle: dict[str, Any], keep: int, signer_label: str | None = None
) -> InMemoryAuditLog:
    """A log holding the bundle's first keep leaves and then others up to the same size."""
    real = audited.cli.stack.fake_audit_log()
    signer = real.signer if signer_label is None else signer_for(real.origin, signer_label)
    forged = InMemoryAuditLog(real.origin, signer)
    for leaf in bundle["leaves"][:keep]:
        forged.append(base64.b64decode(leaf["data"]))
    mallory = sample_proposal("T-9", "Refund everything.", principal="mallory")
    forged.append(mallory)
    while forged.size < len(bundle["leaves"]):
        forged.append(DecisionLeaf(AT, mallory.operation_id, "APPROVE", f"mallory-{forged.size}"))
    forged.sign()
    return forged


def _tampered(bundle: dict[str, Any], audited: Audited) -> dict[str, dict[str, Any]]:
    edited, deleted, truncated, swapped = (copy.deepcopy(bundle) for _ in range(4))
    decision = base64.b64decode(edited["leaves"][1]["data"])
    edited["leaves"][1]["data"] = base64.b64encode(decision.replace(b"rita", b"ruth")).decode()
    del deleted["leaves"][2]
    truncated["leaves"] = truncated["leaves"][:4]
    swapped["leaves"][1], swapped["leaves"][3] = swapped["leaves"][3], swapped["leaves"][1]
    reappended = _rebuilt(bundle, _forged_log(audited, bundle, keep=3), keep=3)
    return {"edited": edited, "deleted": deleted, "truncated": truncated, "swapped": swapped, "reappended": reappended}


@pytest.mark.parametrize(
    ("tampering", "said"),
    [
        ("edited", "leaf 1 does not hold: its inclusion proof does not hold"),
        ("deleted", "leaf 2 does not hold: it is missing (the bundle has leaf 3 in its place)"),
        ("truncated", "leaf 4 does not hold: it is missing: the checkpoint covers 6 leaves"),
        ("swapped", "leaf 1 does not hold: it is missing (the bundle has leaf 3 in its place)"),
        ("reappended", "leaf 3 does not hold: its inclusion proof does not hold"),
    ],
)
def test_a_tampered_leaf_is_named_with_exit_1(audited: Audited, tampering: str, said: str) -> None:
    bundle = export(audited, "all.json", "--all")

    exit_code, out, err = verify(audited, _tampered(bundle, audited)[tampering], "--json")

    assert exit_code == 1
    assert err.startswith(f"decisionflow audit: {said}")
    refused = json.loads(out)
    assert (refused["verified"], refused["what"], refused["exit_code"]) == (False, "leaf", 1)


def test_a_decision_without_its_proposal_is_named(audited: Audited) -> None:
    bundle = export(audited, "approved.json", "--operation", audited.approved)
    del bundle["leaves"][0]

    exit_code, _, err = verify(audited, bundle)

    assert exit_code == 1
    assert err.startswith(f"decisionflow audit: leaf 1 does not hold: a decision of {audited.approved}, whose proposal")


def test_a_checkpoint_the_key_did_not_sign_is_named_with_exit_4(audited: Audited) -> None:
    bundle = export(audited, "all.json", "--all")
    rebuilt = _forged_log(audited, bundle, keep=0, signer_label="another key")
    other_log = _rebuilt(bundle, rebuilt)
    other_log["checkpoint"] = rebuilt.latest_checkpoint().signed_note  # type: ignore[union-attr]
    resigned = copy.deepcopy(bundle)
    text = bundle["checkpoint"][: bundle["checkpoint"].index("\n\n") + 1]
    stated = Checkpoint(audited.cli.stack.fake_audit_log().origin, 6, base64.b64decode(text.splitlines()[2]))
    resigned["checkpoint"] = sign_checkpoint(stated, signer_for(stated.origin, "unknown key"))
    altered = copy.deepcopy(bundle)
    altered["checkpoint"] = bundle["checkpoint"].replace("\n6\n", "\n7\n", 1)

    for forged, said in (
        (other_log, "no signature by a trusted key"),
        (resigned, "no signature by a trusted key"),
        (altered, "does not verify"),
    ):
        exit_code, _, err = verify(audited, forged)
        assert exit_code == 4, err
        assert err.startswith("decisionflow audit: checkpoint does not hold: ") and said in err


def test_an_older_checkpoint_the_log_does_not_extend_is_named_with_exit_4(audited: Audited) -> None:
    bundle = export(audited, "since.json", "--all", "--since", str(audited.older))
    fork = _forged_log(audited, bundle, keep=2)  # the same key signed another history: a split view
    forked = audited.directory / "forked-checkpoint.txt"
    forked_log = InMemoryAuditLog(fork.origin, fork.signer)
    for leaf in fork.leaves(0, 4):
        forked_log.append(leaf.data)
    forked.write_text(forked_log.sign().signed_note)
    unproven = export(audited, "plain.json", "--case", "T-2", principal="ops")
    whole = export(audited, "whole.json", "--all")

    diverged, _, diverged_err = verify(audited, bundle, "--since", str(forked))
    missing, _, missing_err = verify(audited, unproven, "--since", str(audited.older))
    # A whole-log bundle needs no carried proof: its leaves are the older tree's, or they are not.
    by_leaves, _, by_leaves_err = verify(audited, whole, "--since", str(forked))

    assert diverged == missing == by_leaves == 4
    assert diverged_err.startswith(
        "decisionflow audit: the --since checkpoint does not hold: checkpoint 6 does not extend"
    )
    assert "carries no consistency proof from size 4" in missing_err
    assert by_leaves_err == (
        "decisionflow audit: the --since checkpoint does not hold: checkpoint 6 does not extend it: "
        "its first 4 leaves hash to another root\n"
    )
    assert verify(audited, whole, "--since", str(audited.older))[0] == 0


def test_refusals_and_bad_input(audited: Audited) -> None:
    cli = audited.cli
    unknown = "op-v1-" + "0" * 64
    not_found = run(
        cli, "export", "--operation", unknown, "--out", str(audited.directory / "x.json"), principal="audrey"
    )
    reviewer = run(cli, "export", "--all", "--out", str(audited.directory / "x.json"), principal="rita")
    no_scope = run(cli, "export", "--out", str(audited.directory / "x.json"), principal="audrey")
    bad_key = audited.directory / "bad.vkey"
    bad_key.write_text("not a key\n")
    not_bundle = audited.directory / "not-a-bundle.json"
    not_bundle.write_text(json.dumps({"format": "something else"}))

    assert not_found[0] == 3 and "NOT_FOUND" in not_found[2]
    assert reviewer[0] == 3 and "PERMISSION_DENIED" in reviewer[2]
    assert no_scope[0] == 2 and "one of the arguments --operation --case --all is required" in no_scope[2]
    assert not (audited.directory / "x.json").exists()
    assert run(cli, "verify", str(not_bundle), "--public-key", str(audited.key_file))[0] == 2
    export(audited, "good.json", "--all")
    bad = run(cli, "verify", str(audited.directory / "good.json"), "--public-key", str(bad_key))
    assert bad[0] == 2 and "is not a verifier key" in bad[2]


def test_a_decision_the_latest_checkpoint_does_not_cover_is_told_at_export_and_refused_at_verify(
    audited: Audited,
) -> None:
    # The pending operation is decided now: the orchestrator records it, no checkpoint covers its leaf yet.
    assert audited.cli("decline", audited.pending).exit_code == 0
    path = audited.directory / "pending.json"

    exported = run(audited.cli, "export", "--operation", audited.pending, "--out", str(path), principal="audrey")
    checked = verify(audited, path)

    assert exported[0] == 0
    assert (
        f"note: the orchestrator records a decision of {audited.pending} that checkpoint 6 does not cover"
        in exported[2]
    )
    assert checked[0] == 1
    assert checked[2].startswith(
        f"decisionflow audit: record of {audited.pending} does not hold: the orchestrator records"
    )
