"""The reroute leaf: its documented fields, a byte-for-byte round trip, refusal of anything the encoder would
not write, and the auditor's history: a reroute only of an untouched open review, to another rule of its
proposal's action, after which votes and the decision are checked against the new rule; and nothing after
an expiry."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from decisionflow.identity import frame
from decisionflow.review_rules import ReviewRule, Stage, default_rule, rule_fields
from decisionflow.transparency import (
    DecisionLeaf,
    ExpiryLeaf,
    History,
    HistoryError,
    MalformedLeaf,
    RerouteLeaf,
    VoteLeaf,
    decode_leaf,
    encode_leaf,
    leaf_hash,
)
from tests.support.audit_log import sample_proposal
from tests.transparency.test_leaves import TWO_STAGES, proposal

STARTED = sample_proposal("T-1", "Refund the order.")
ACTION = STARTED.action
OPERATION = STARTED.operation_id
AT = STARTED.recorded_at + timedelta(minutes=5)
TWO_LEADS = ReviewRule(ACTION, (Stage("leads", ("support-leads",), 2),))
HEAD = ["decisionflow.audit.leaf.v1", "reroute", "2026-12-04T08:35:00.000000Z", OPERATION, ACTION]


def test_a_reroute_leaf_is_its_documented_fields_and_round_trips() -> None:
    to_rule = RerouteLeaf(AT, OPERATION, ACTION, TWO_LEADS)
    assert encode_leaf(to_rule) == frame([*HEAD, *rule_fields(TWO_LEADS)])
    to_default = RerouteLeaf(AT, OPERATION, ACTION, None)
    assert encode_leaf(to_default) == frame(HEAD)
    for leaf in (to_rule, to_default):
        assert decode_leaf(encode_leaf(leaf)) == leaf


def test_a_reroute_leaf_no_encoder_writes_is_refused() -> None:
    with pytest.raises(MalformedLeaf, match="default rule"):
        decode_leaf(frame([*HEAD, *rule_fields(default_rule(ACTION))]))
    other = ReviewRule("another_action", TWO_LEADS.stages)
    with pytest.raises(MalformedLeaf, match="carries the rule of 'another_action'"):
        decode_leaf(frame([*HEAD, *rule_fields(other)]))
    with pytest.raises(MalformedLeaf, match="review rule is malformed"):
        decode_leaf(frame([*HEAD, *rule_fields(TWO_LEADS)[:-1]]))
    with pytest.raises(MalformedLeaf, match="fewer fields"):
        decode_leaf(frame(HEAD[:-1]))
    with pytest.raises(ValueError, match="default rule is written as no rule"):
        encode_leaf(RerouteLeaf(AT, OPERATION, ACTION, default_rule(ACTION)))


def _history(*leaves: object) -> History:
    history = History()
    for index, leaf in enumerate((STARTED, *leaves)):
        history.read(index, encode_leaf(leaf))  # type: ignore[arg-type]
    return history


def _vote(principal: str, minutes: int, decision: str = "APPROVE") -> VoteLeaf:
    return VoteLeaf(AT + timedelta(minutes=minutes), OPERATION, decision, principal, 0, ("support-leads",))


def test_after_a_reroute_votes_and_the_decision_follow_the_new_rule() -> None:
    reroute = RerouteLeaf(AT, OPERATION, ACTION, TWO_LEADS)
    approved = DecisionLeaf(AT + timedelta(minutes=3), OPERATION, "APPROVE", "lou")
    history = _history(reroute, _vote("lee", 1), _vote("lou", 2), approved)
    assert history.kinds == {"proposal": 1, "reroute": 1, "vote": 2, "decision": 1}
    # Under the default rule one approval decides; after the reroute one vote does not complete the rule.
    with pytest.raises(HistoryError, match="do not complete its rule"):
        _history(reroute, _vote("lee", 1), approved)
    with pytest.raises(HistoryError, match="do not complete its rule"):
        _history(reroute, dataclasses.replace(approved, principal="rita@example.com"))
    # Rerouted back to the default rule, one approval decides again.
    back = RerouteLeaf(AT + timedelta(minutes=1), OPERATION, ACTION, None)
    assert _history(reroute, back, approved).kinds["reroute"] == 2


@pytest.mark.parametrize(
    ("leaves", "message"),
    [
        ((RerouteLeaf(AT, OPERATION, ACTION, None),), "to the rule it already follows"),
        ((RerouteLeaf(AT, OPERATION, "another_action", None),), "not of 'record_support_review'"),
        (
            (
                RerouteLeaf(AT, OPERATION, ACTION, TWO_LEADS),
                VoteLeaf(AT, OPERATION, "APPROVE", "lee", 0, ("support-leads",)),
                RerouteLeaf(AT, OPERATION, ACTION, None),
            ),
            "has votes or an escalation already",
        ),
        (
            (DecisionLeaf(AT, OPERATION, "DECLINE", "rita"), RerouteLeaf(AT, OPERATION, ACTION, TWO_LEADS)),
            "after its decision",
        ),
        ((ExpiryLeaf(AT, OPERATION), RerouteLeaf(AT, OPERATION, ACTION, TWO_LEADS)), "after its expiry"),
        ((ExpiryLeaf(AT, OPERATION), DecisionLeaf(AT, OPERATION, "APPROVE", "rita")), "after its expiry"),
        ((ExpiryLeaf(AT, OPERATION), ExpiryLeaf(AT, OPERATION)), "after its expiry"),
    ],
)
def test_the_history_refuses_a_reroute_or_a_decision_the_review_does_not_admit(
    leaves: tuple[object, ...], message: str
) -> None:
    with pytest.raises(HistoryError, match=message):
        _history(*leaves)


def test_the_documented_reroute_vectors() -> None:
    """docs/audit-log.md, "Leaves": the identities example's operation re-routed to the default rule, then to
    the two-stage rule of the proposal vector."""
    example = proposal()
    to_default = encode_leaf(RerouteLeaf(example.recorded_at, example.operation_id, ACTION, None))
    assert to_default.hex() == (
        "0000001a6465636973696f6e666c6f772e61756469742e6c6561662e7631000000077265726f7574650000001b"
        "323032362d31322d30345430383a33303a30302e3132333435365a000000466f702d76312d32636433303138376636"
        "3038643433656131393736353439356162373336383436323135333635313835306239646564373538663035313363"
        "6364616337313600000015"
        "7265636f72645f737570706f72745f726576696577"
    )
    assert leaf_hash(to_default).hex() == "3190f5dd8b70b09405a5ee88138c689d54d210fef7ec47ae1fe06de8a79e2a65"
    to_rule = encode_leaf(RerouteLeaf(example.recorded_at, example.operation_id, ACTION, TWO_STAGES))
    assert to_rule == to_default + frame(rule_fields(TWO_STAGES)) and len(to_rule) == 365
    assert leaf_hash(to_rule).hex() == "de9335c81d2620be6d7ab66ccd54bf3f6ba20ea63e6b1e0ae5c671c7689b9e2c"
