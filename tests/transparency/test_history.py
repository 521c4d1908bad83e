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
    VoteLeaf,
    encode_leaf,
)
from tests.support.audit_log import AT, sample_proposal
from tests.transparency.test_leaves import TWO_STAGES

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


# Under the two-stage rule: two of support-leads, then one of finance; the proposal's author is A's principal.
R = dataclasses.replace(sample_proposal("T-3", "Refund the order."), rule=TWO_STAGES)
LEADS, FINANCE = ("support-leads",), ("finance",)


def _vote(principal: str, stage: int, groups: tuple[str, ...], decision: str = "APPROVE") -> VoteLeaf:
    return VoteLeaf(AT, R.operation_id, decision, principal, stage, groups)


def test_an_approval_after_votes_that_complete_the_rule_passes() -> None:
    history = _read(
        R,
        _vote("lee", 0, LEADS),
        _vote("lin", 0, ("finance", "support-leads")),
        _vote("fay", 1, FINANCE),
        DecisionLeaf(AT, R.operation_id, "APPROVE", "fay"),
        EffectLeaf(AT, R.operation_id, "r-1", AT),
    )
    assert history.kinds == {"proposal": 1, "vote": 3, "decision": 1, "effect": 1}
    assert [v.principal for v in history.operations[R.operation_id].votes] == ["lee", "lin", "fay"]


def test_a_decline_after_the_vote_that_ended_the_review_passes() -> None:
    _read(R, _vote("lee", 0, LEADS, "DECLINE"), DecisionLeaf(AT, R.operation_id, "DECLINE", "lee"))


QUORUM_REFUSED: list[tuple[str, list[Leaf], int, str]] = [
    (
        "an approval short of the quorum",
        [R, _vote("lee", 0, LEADS), _vote("lin", 0, LEADS), DecisionLeaf(AT, R.operation_id, "APPROVE", "lin")],
        3,
        "do not complete its rule",
    ),
    ("an approval without votes", [R, DecisionLeaf(AT, R.operation_id, "APPROVE", "rita")], 1, "do not complete"),
    ("a decline nobody voted", [R, DecisionLeaf(AT, R.operation_id, "DECLINE", "rita")], 1, "do not end"),
    ("a vote outside the stage's groups", [R, _vote("lee", 0, FINANCE)], 1, "in none of the groups"),
    ("the author's vote", [R, _vote(R.principal, 0, LEADS)], 1, "author"),
    ("a second vote", [R, _vote("lee", 0, LEADS), _vote("lee", 0, LEADS)], 2, "already decided"),
    (
        "one principal in two stages",
        [R, _vote("lee", 0, LEADS), _vote("lin", 0, LEADS), _vote("lin", 1, ("finance", "support-leads"))],
        3,
        "earlier stage",
    ),
    ("a vote naming another stage", [R, _vote("lee", 1, LEADS)], 1, "names stage 1"),
    (
        "a vote after the decision",
        [
            R,
            _vote("lee", 0, LEADS, "DECLINE"),
            DecisionLeaf(AT, R.operation_id, "DECLINE", "lee"),
            _vote("lin", 0, LEADS),
        ],
        3,
        "after its decision",
    ),
]


@pytest.mark.parametrize(
    ("leaves", "index", "said"), [c[1:] for c in QUORUM_REFUSED], ids=[c[0] for c in QUORUM_REFUSED]
)
def test_the_first_leaf_that_breaks_the_rule_is_named(leaves: list[Leaf], index: int, said: str) -> None:
    with pytest.raises(HistoryError) as refused:
        _read(*leaves)
    assert refused.value.index == index and said in refused.value.reason
