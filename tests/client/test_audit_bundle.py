"""Bundles without any service (decisionflow.audit_bundle): the file is read strictly, and verify_bundle
names the first leaf or record that does not hold in partial bundles and in the orchestrator's records:
a record disagreeing with a decision, an effect or a settlement leaf, and records that do not match
the bundle's scope one to one."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Sequence

import pytest

from decisionflow.audit_bundle import (
    Bundle,
    BundleLeaf,
    BundleRefused,
    MalformedBundle,
    Record,
    dump_bundle,
    load_bundle,
    verify_bundle,
)
from decisionflow.transparency import DecisionLeaf, EffectLeaf, NoteVerifier, SettlementLeaf
from tests.support.audit_log import AT, InMemoryAuditLog, sample_proposal

A = sample_proposal("T-1", "Known issue; update to 4.2.1.")
B = sample_proposal("T-2", "Please send the diagnostic export.")


def _log() -> InMemoryAuditLog:
    """0 proposal A, 1 proposal B, 2 decision A, 3 effect A, 4 decision B; signed at 5."""
    log = InMemoryAuditLog()
    for leaf in (
        A,
        B,
        DecisionLeaf(AT, A.operation_id, "APPROVE", "rita"),
        EffectLeaf(AT, A.operation_id, "r-1", AT),
        DecisionLeaf(AT, B.operation_id, "DECLINE", "rita"),
    ):
        log.append(leaf)
    log.sign()
    return log


LOG = _log()
KEY = NoteVerifier.from_vkey(LOG.vkey)


def _text(data: bytes) -> str:
    return base64.b64encode(data).decode()


def bundle_of(indices: Sequence[int], scope: dict[str, str | bool], records: Sequence[Record] = ()) -> Bundle:
    checkpoint = LOG.latest_checkpoint()
    assert checkpoint is not None
    leaves = tuple(
        BundleLeaf(i, _text(LOG.leaves(i, 1)[0].data), tuple(_text(h) for h in LOG.inclusion_proof(i, checkpoint.size)))
        for i in indices
    )
    return Bundle(LOG.origin, scope, checkpoint.signed_note, leaves, tuple(records), None, "2026-12-04T08:30:00+00:00")


OPERATION_A: dict[str, str | bool] = {"operation_id": A.operation_id}
RECORD_A = Record(A.operation_id, True, "COMMITTED", "APPROVE", "rita", "r-1")


def test_a_bundle_round_trips_through_its_file_and_verifies() -> None:
    bundle = bundle_of([0, 2, 3], OPERATION_A, [RECORD_A])

    again = load_bundle(dump_bundle(bundle))
    proof = verify_bundle(again, KEY)

    assert again == bundle
    assert (proof.tree_size, proof.leaves, proof.records, proof.whole_log) == (5, 3, 1, False)
    assert proof.kinds == {"proposal": 1, "decision": 1, "effect": 1}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d.update(extra=1), "unknown keys ['extra']"),
        (lambda d: d.pop("records"), "lacks ['records']"),
        (lambda d: d["leaves"][0].update(index=True), "leaves[0].index is not int"),
        (lambda d: d["leaves"][0].update(index="0"), "leaves[0].index is not int"),
        (lambda d: d.update(scope={"all": True, "case_id": "T-1"}), "scope is not one of"),
        (lambda d: d.update(format="decisionflow.audit.bundle.v2"), "is not decisionflow.audit.bundle.v1"),
        (lambda d: d["records"][0].update(found="yes"), "records[0].found is not bool"),
    ],
)
def test_a_file_out_of_shape_is_not_a_bundle(change: object, said: str) -> None:
    document = json.loads(dump_bundle(bundle_of([0, 2], OPERATION_A, [RECORD_A])))
    change(document)  # type: ignore[operator]
    with pytest.raises(MalformedBundle, match=said.replace("[", r"\[").replace("]", r"\]")):
        load_bundle(json.dumps(document))


def test_a_key_given_twice_is_refused() -> None:
    text = dump_bundle(bundle_of([0], OPERATION_A)).replace('"origin":', '"origin": "elsewhere", "origin":', 1)
    with pytest.raises(MalformedBundle, match="given twice"):
        load_bundle(text)


def _refusal(bundle: Bundle) -> BundleRefused:
    with pytest.raises(BundleRefused) as refused:
        verify_bundle(bundle, KEY)
    return refused.value


def test_leaves_out_of_order_base64_or_scope_are_named() -> None:
    swapped = bundle_of([2, 0], OPERATION_A)
    repeated = bundle_of([0, 0], OPERATION_A)
    garbled = bundle_of([0, 2], OPERATION_A)
    garbled = dataclasses.replace(
        garbled, leaves=(garbled.leaves[0], dataclasses.replace(garbled.leaves[1], data="%%"))
    )
    foreign = bundle_of([0, 1], OPERATION_A)
    of_case = bundle_of([0, 1], {"case_id": "T-1"})
    empty = bundle_of([], OPERATION_A)

    # Read in the bundle's order, the decision comes before its proposal.
    assert (_refusal(swapped).index, _refusal(swapped).reason) == (
        2,
        f"a decision of {A.operation_id}, whose proposal is not among the leaves before",
    )
    assert _refusal(repeated).reason == "it comes after leaf 0: leaves are in index order"
    assert (_refusal(garbled).index, _refusal(garbled).reason) == (2, "its data is not base64")
    assert (_refusal(foreign).index, _refusal(foreign).reason) == (
        1,
        f"it is of {B.operation_id}, not of the bundle's operation",
    )
    assert (_refusal(of_case).index, _refusal(of_case).reason) == (1, "it is of case T-2, not of the bundle's case")
    assert (_refusal(empty).what, _refusal(empty).where) == ("leaf", "leaves")


@pytest.mark.parametrize(
    ("record", "where", "index", "said"),
    [
        (
            Record(A.operation_id, False),
            f"record of {A.operation_id}",
            0,
            "has no record of an operation the log holds",
        ),
        (dataclasses.replace(RECORD_A, decision="DECLINE"), "leaf 2", 2, "now records DECLINE by 'rita'"),
        (dataclasses.replace(RECORD_A, decision="", reviewer=""), "leaf 2", 2, "now records no decision"),
        (dataclasses.replace(RECORD_A, receipt_id="r-2"), f"record of {A.operation_id}", 3, "receipt 'r-2'"),
        (dataclasses.replace(RECORD_A, receipt_id=""), f"record of {A.operation_id}", 3, "no receipt, the log 'r-1'"),
    ],
)
def test_a_record_that_disagrees_with_the_log_is_named(record: Record, where: str, index: int, said: str) -> None:
    refused = _refusal(bundle_of([0, 2, 3], OPERATION_A, [record]))
    assert (refused.where, refused.index) == (where, index)
    assert said in refused.reason


def test_a_decision_the_log_does_not_hold_yet_is_named_after_the_leaves() -> None:
    undecided = bundle_of([1], {"case_id": "T-2"}, [Record(B.operation_id, True, "DECLINED", "DECLINE", "rita")])
    refused = _refusal(undecided)
    assert (refused.what, refused.index) == ("record", None)
    assert "no decision leaf of it is in the bundle" in refused.reason


def test_a_record_whose_receipt_is_not_that_of_its_settlement_leaf_is_named() -> None:
    log = InMemoryAuditLog()
    for leaf in (
        A,
        DecisionLeaf(AT, A.operation_id, "APPROVE", "rita"),
        SettlementLeaf(AT, A.operation_id, "COMMITTED", "reconciler", "r-settled", AT),
    ):
        log.append(leaf)
    checkpoint = log.sign()
    leaves = tuple(
        BundleLeaf(i, _text(log.leaves(i, 1)[0].data), tuple(_text(h) for h in log.inclusion_proof(i, checkpoint.size)))
        for i in range(3)
    )
    settled = Record(A.operation_id, True, "COMMITTED", "APPROVE", "rita", "r-settled")

    def verified(record: Record) -> int:
        bundle = Bundle(log.origin, OPERATION_A, checkpoint.signed_note, leaves, (record,), None, "")
        return verify_bundle(bundle, NoteVerifier.from_vkey(log.vkey)).records

    assert verified(settled) == 1
    for receipt_id, said in (("r-forged", "receipt 'r-forged'"), ("", "no receipt")):
        with pytest.raises(BundleRefused) as refused:
            verified(dataclasses.replace(settled, receipt_id=receipt_id))
        assert (refused.value.what, refused.value.index) == ("record", 2)
        assert refused.value.reason == f"the orchestrator records {said}, the log 'r-settled' (leaf 2)"


RECORD_B = Record(B.operation_id, True, "DECLINED", "DECLINE", "rita")


@pytest.mark.parametrize(
    ("records", "where", "index", "said"),
    [
        ((), f"record of {A.operation_id}", 0, "it is missing"),
        ((RECORD_A,), f"record of {B.operation_id}", 1, "it is missing"),
        ((RECORD_A, RECORD_B, RECORD_B), f"record of {B.operation_id}", 1, "it is given 2 times"),
        ((RECORD_A, RECORD_A, RECORD_B), f"record of {A.operation_id}", 0, "it is given 2 times"),
        ((RECORD_A, RECORD_B, Record("op-v1-" + "0" * 64, False)), "record of op-v1-" + "0" * 64, None, "no such"),
    ],
)
def test_records_that_do_not_match_the_scope_one_to_one_are_refused(
    records: tuple[Record, ...], where: str, index: int | None, said: str
) -> None:
    whole = bundle_of(range(5), {"all": True}, records)
    assert verify_bundle(bundle_of(range(5), {"all": True}, [RECORD_A, RECORD_B]), KEY).records == 2

    refused = _refusal(whole)

    assert (refused.what, refused.where, refused.index) == ("record", where, index)
    assert said in refused.reason


def test_an_operation_bundle_without_its_record_is_refused_and_the_leaves_alone_still_verify() -> None:
    bundle = bundle_of([0, 2, 3], OPERATION_A)

    assert _refusal(bundle).where == f"record of {A.operation_id}"
    assert verify_bundle(bundle, KEY, records=False).records == 0
