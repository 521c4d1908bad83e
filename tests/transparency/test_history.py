"""The rules an auditor reads a run of leaves by (decisionflow.transparency.History): each refusal names
the first leaf that does not hold, and an honest history of every kind of event passes."""

from __future__ import annotations

import dataclasses

import pytest

from decisionflow.transparency import (
    DecisionLeaf,
    EffectLeaf,
    ExpiryLeaf,
    History,
    HistoryError,
    Leaf,
    RejectionLeaf,
    SettlementLeaf,
    encode_leaf,
)
from tests.support.audit_log import AT, sample_proposal

A = sample_proposal("T-1", "Known issue; update to 4.2.1.")
B = sample_proposal("T-2", "Please send the diagnostic export.")


def _read(*leaves: Leaf | bytes) -> History:
    history = History()
    for index, leaf in enumerate(leaves):
        history.read(index, leaf if isinstance(leaf, bytes) else encode_leaf(leaf))
    return history


def test_an_honest_history_of_every_kind_passes() -> None:
    history = _read(
        A,
        B,
        DecisionLeaf(AT, A.operation_id, "APPROVE", "rita"),
        EffectLeaf(AT, A.operation_id, "r-1", AT),
        SettlementLeaf(AT, A.operation_id, "COMMITTED", "olga", "rcpt-a", AT),
        ExpiryLeaf(AT, B.operation_id),
    )
    assert history.kinds == {"proposal": 2, "decision": 1, "effect": 1, "settlement": 1, "expiry": 1}
    logged = history.operations[A.operation_id]
    assert (logged.proposal, logged.decision_index, sorted(logged.leaves)) == (A, 2, [0, 2, 3, 4])
    assert [effect.receipt_id for effect in logged.effects] == ["r-1"]


FORGED = dataclasses.replace(A, body=A.body + " And a sentence nobody reviewed.")

REFUSED: list[tuple[str, list[Leaf | bytes], int, str]] = [
    ("not a leaf", [A, b"\x00\x00\x00\x01x"], 1, "not a decisionflow.audit.leaf.v1 leaf"),
    ("content that is not its id's", [FORGED], 0, "content yields"),
    ("a decision before its proposal", [B, DecisionLeaf(AT, A.operation_id, "APPROVE", "rita"), A], 1, "proposal"),
    (
        "a second decision",
        [A, DecisionLeaf(AT, A.operation_id, "APPROVE", "rita"), DecisionLeaf(AT, A.operation_id, "DECLINE", "eve")],
        2,
        "second decision",
    ),
    ("a decision that is none", [A, DecisionLeaf(AT, A.operation_id, "MAYBE", "rita")], 1, "neither"),
    (
        "an effect of a declined operation",
        [A, DecisionLeaf(AT, A.operation_id, "DECLINE", "r"), EffectLeaf(AT, A.operation_id, "r-1", None)],
        2,
        "approved",
    ),
    ("a rejection never approved", [A, RejectionLeaf(AT, A.operation_id, "refused")], 1, "approved"),
    ("an expiry of nothing proposed", [ExpiryLeaf(AT, A.operation_id)], 0, "proposal"),
]


@pytest.mark.parametrize(("leaves", "index", "said"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_the_first_leaf_that_does_not_hold_is_named(leaves: list[Leaf | bytes], index: int, said: str) -> None:
    with pytest.raises(HistoryError) as refused:
        _read(*leaves)
    assert refused.value.index == index
    assert said in refused.value.reason


def test_leaves_are_read_in_index_order() -> None:
    history = History()
    history.read(3, encode_leaf(A))
    with pytest.raises(HistoryError) as refused:
        history.read(2, encode_leaf(B))
    assert (refused.value.index, refused.value.reason) == (2, "comes after leaf 3: leaves are read in index order")
