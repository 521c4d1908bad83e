"""What an auditor trusts when verify_bundle opens a bundle's checkpoints (decisionflow.audit_bundle): several
keys across a key rotation, the origin when pinned, and, for a whole-log bundle, an older checkpoint linked
by the leaves themselves; and what the proof says it proved (the scope, the origin, the keys)."""

from __future__ import annotations

import base64
import dataclasses

import pytest

from decisionflow.audit_bundle import Bundle, BundleLeaf, BundleRefused, Record, Since, verify_bundle
from decisionflow.transparency import DecisionLeaf
from tests.support.audit_log import AT, InMemoryAuditLog, sample_proposal, signer_for

A = sample_proposal("T-1", "Known issue; update to 4.2.1.")
B = sample_proposal("T-2", "Please send the diagnostic export.")
RECORDS = (
    Record(A.operation_id, True, "APPROVED", "APPROVE", "rita"),
    Record(B.operation_id, True, "PENDING_REVIEW"),
)
OLD_SIGNER = signer_for("audit.test/orchestrator", "old key")
NEW_SIGNER = signer_for("audit.test/orchestrator", "new key")
OLD, NEW = OLD_SIGNER.verifier(), NEW_SIGNER.verifier()


def _text(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _rotated() -> tuple[InMemoryAuditLog, str]:
    """A log whose checkpoint 2 the old key signed and checkpoint 3 the new; and checkpoint 2's note."""
    log = InMemoryAuditLog(signer=OLD_SIGNER)
    log.append(A)
    log.append(DecisionLeaf(AT, A.operation_id, "APPROVE", "rita"))
    older = log.sign().signed_note
    log.signer = NEW_SIGNER
    log.append(B)
    log.sign()
    return log, older


def _whole(log: InMemoryAuditLog, since: str | None = None) -> Bundle:
    checkpoint = log.latest_checkpoint()
    assert checkpoint is not None
    leaves = tuple(
        BundleLeaf(i, _text(log.leaves(i, 1)[0].data), tuple(_text(h) for h in log.inclusion_proof(i, checkpoint.size)))
        for i in range(checkpoint.size)
    )
    carried = None
    if since is not None:
        old_size = int(since.splitlines()[1])
        carried = Since(since, tuple(_text(h) for h in log.consistency_proof(old_size, checkpoint.size)))
    return Bundle(log.origin, {"all": True}, checkpoint.signed_note, leaves, RECORDS, carried, "")


def test_after_a_rotation_both_keys_verify_the_new_checkpoint_since_the_old_one() -> None:
    log, older = _rotated()
    bundle = _whole(log, older)

    proof = verify_bundle(bundle, [OLD, NEW])

    assert (proof.key, proof.since_key, proof.since_size, proof.since_proven_by) == (
        NEW.vkey,
        OLD.vkey,
        2,
        "consistency proof",
    )
    with pytest.raises(BundleRefused) as new_only:
        verify_bundle(bundle, NEW)
    with pytest.raises(BundleRefused) as old_only:
        verify_bundle(bundle, [OLD])
    assert (new_only.value.what, new_only.value.where) == ("since", "the bundle's since checkpoint")
    assert (old_only.value.what, "no signature by a trusted key" in old_only.value.reason) == ("checkpoint", True)


def test_a_pinned_origin_refuses_a_checkpoint_of_another_origin_signed_with_the_right_key() -> None:
    log = InMemoryAuditLog(origin="other.example/log", signer=OLD_SIGNER)
    log.append(A)
    log.append(B)
    log.sign()
    undecided = (Record(A.operation_id, True, "PENDING_REVIEW"), RECORDS[1])
    bundle = dataclasses.replace(_whole(log), records=undecided)

    unpinned = verify_bundle(bundle, OLD)
    with pytest.raises(BundleRefused) as pinned:
        verify_bundle(bundle, OLD, origin="audit.test/orchestrator")

    assert (unpinned.origin, unpinned.origin_pinned) == ("other.example/log", False)
    assert (pinned.value.what, pinned.value.where) == ("checkpoint", "checkpoint")
    assert "not of 'audit.test/orchestrator' (--origin)" in pinned.value.reason
    # A bundle that names the pinned origin but holds a checkpoint of another is refused at its checkpoint too.
    relabelled = dataclasses.replace(bundle, origin="audit.test/orchestrator")
    with pytest.raises(BundleRefused) as inner:
        verify_bundle(relabelled, OLD, origin="audit.test/orchestrator")
    assert (inner.value.what, inner.value.reason) == (
        "checkpoint",
        "the checkpoint is of log 'other.example/log', not 'audit.test/orchestrator'",
    )
    assert verify_bundle(_whole(_rotated()[0]), NEW, origin="audit.test/orchestrator").origin_pinned is True


def test_a_whole_log_bundle_proves_consistency_with_an_older_checkpoint_by_its_leaves() -> None:
    log, older = _rotated()
    bundle = _whole(log)  # carries no consistency proof

    proof = verify_bundle(bundle, [OLD, NEW], since=older)

    assert (proof.since_size, proof.since_proven_by, proof.scope) == (2, "leaves", {"all": True})
    forked = InMemoryAuditLog(signer=OLD_SIGNER)
    forked.append(A)
    forked.append(DecisionLeaf(AT, A.operation_id, "DECLINE", "mallory"))
    with pytest.raises(BundleRefused) as refused:
        verify_bundle(bundle, [OLD, NEW], since=forked.sign().signed_note)
    assert (refused.value.what, refused.value.where) == ("since", "the --since checkpoint")
    assert refused.value.reason == "checkpoint 3 does not extend it: its first 2 leaves hash to another root"
    forked.append(B)
    forked.append(A)
    with pytest.raises(BundleRefused) as larger:
        verify_bundle(bundle, [OLD, NEW], since=forked.sign().signed_note)
    assert (larger.value.what, larger.value.reason) == ("since", "checkpoint 3 does not extend it: it covers 4 leaves")


def test_a_partial_bundle_still_needs_a_carried_proof_and_names_its_scope() -> None:
    log, older = _rotated()
    whole = _whole(log)
    partial = dataclasses.replace(whole, scope={"case_id": "T-1"}, leaves=whole.leaves[:2], records=RECORDS[:1])

    assert verify_bundle(partial, NEW).scope == {"case_id": "T-1"}
    with pytest.raises(BundleRefused, match="carries no consistency proof from size 2"):
        verify_bundle(partial, [OLD, NEW], since=older)


def test_no_key_is_no_trust() -> None:
    log, _ = _rotated()
    with pytest.raises(ValueError, match="no verifier key"):
        verify_bundle(_whole(log), [])
