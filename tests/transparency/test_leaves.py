"""The audit log's leaves: every kind round-trips byte for byte, a vector pins the encoding, anything
another encoder would not have written is refused, and a proposal leaf's content must yield its id."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decisionflow.identity import EvidenceItem, PolicyRef, frame, identities
from decisionflow.review_rules import ReviewRule, Stage, default_rule, rule_fields
from decisionflow.transparency import (
    DecisionLeaf,
    EffectLeaf,
    ExpiryLeaf,
    Leaf,
    MalformedLeaf,
    ProposalLeaf,
    RejectionLeaf,
    SettlementLeaf,
    VoteLeaf,
    check_proposal,
    decode_leaf,
    encode_leaf,
    leaf_hash,
)
from decisionflow.vocabulary import CaseId, OperationId

AT = datetime(2026, 12, 4, 8, 30, 0, 123456, tzinfo=UTC)
# In the order a leaf writes them (by source_id), so a decoded leaf equals the one encoded.
EVIDENCE = (
    EvidenceItem("kb-771", 3, "Firmware 4.2.1 drops the connection after sleep."),
    EvidenceItem("release-notes-4.2.2", 1, "Fixes reconnect after sleep."),
)
POLICY = PolicyRef("support-replies", "2026-03", 9, {"tone": "plain", "max_links": "2"})
BODY = "Known firmware issue 4.2.1.\nPlease update to 4.2.2 and restart the device."
# docs/identities.md's worked example.
OPERATION = OperationId("op-v1-2cd30187f608d43ea19765495ab7368462153651850b9ded758f0513ccdac716")


def proposal(**changes: object) -> ProposalLeaf:
    fields: dict[str, object] = {
        "recorded_at": AT,
        "event": "started",
        "principal": "author-1",
        "case_id": CaseId("T-1042"),
        "operation_id": OPERATION,
        "previous_operation_id": None,
        "action": "record_support_review",
        "body": BODY,
        "evidence": EVIDENCE,
        "policy": POLICY,
    }
    fields.update(changes)
    return ProposalLeaf(**fields)  # type: ignore[arg-type]


# Two leads of support-leads, then one of finance (docs/review-rules.md's first example, for this action).
TWO_STAGES = ReviewRule(
    "record_support_review",
    (
        Stage("leads", ("support-leads",), 2, 1, timedelta(hours=4), ("on-call-leads",)),
        Stage("finance", ("finance",)),
    ),
    timedelta(hours=72),
)

LEAVES: list[Leaf] = [
    proposal(),
    proposal(rule=TWO_STAGES),
    proposal(event="edited", previous_operation_id=OperationId("op-v1-" + "a" * 64)),
    DecisionLeaf(AT, OPERATION, "APPROVE", "reviewer-1"),
    EffectLeaf(AT, OPERATION, "rcpt-1", AT),
    EffectLeaf(AT, OPERATION, "rcpt-1", None),
    RejectionLeaf(AT, OPERATION, "IDEMPOTENCY_KEY_REUSED"),
    SettlementLeaf(AT, OPERATION, "COMMITTED", "operator-1", "rcpt-2", AT),
    SettlementLeaf(AT, OPERATION, "COMMITTED", "reconciler", "rcpt-2", None),
    ExpiryLeaf(AT, OPERATION),
    VoteLeaf(AT, OPERATION, "APPROVE", "lee", 0, ("finance", "support-leads")),
    VoteLeaf(AT, OPERATION, "DECLINE", "lee", 1, ()),
]


@pytest.mark.parametrize("leaf", LEAVES, ids=lambda leaf: type(leaf).__name__)
def test_every_kind_round_trips_byte_for_byte(leaf: Leaf) -> None:
    data = encode_leaf(leaf)
    assert decode_leaf(data) == leaf
    assert encode_leaf(decode_leaf(data)) == data


def test_a_decision_leaf_is_the_documented_frame() -> None:
    data = encode_leaf(DecisionLeaf(AT, OPERATION, "APPROVE", "reviewer-1"))
    expected = frame(
        ["decisionflow.audit.leaf.v1", "decision", "2026-12-04T08:30:00.123456Z", OPERATION, "APPROVE", "reviewer-1"]
    )
    assert data == expected
    assert data.startswith(bytes.fromhex("0000001a") + b"decisionflow.audit.leaf.v1" + bytes.fromhex("00000008"))
    # docs/audit-log.md, "Leaves", prints these bytes and the hash the log keeps for them (RFC 9162:
    # SHA-256 of 0x00 || leaf).
    assert len(data) == 172
    assert data.hex() == (
        "0000001a6465636973696f6e666c6f772e61756469742e6c6561662e7631000000086465636973696f6e0000001b"
        "323032362d31322d30345430383a33303a30302e3132333435365a000000466f702d76312d32636433303138376636"
        "3038643433656131393736353439356162373336383436323135333635313835306239646564373538663035313363"
        "6364616337313600000007415050524f56450000000a72657669657765722d31"
    )
    assert leaf_hash(data).hex() == "4410a041d2081091c2177b95a75475533b9acae46939ac7291a64b7cac0d1d01"


def test_a_proposal_leaf_with_a_two_stage_rule_is_the_documented_frame() -> None:
    leaf = proposal(rule=TWO_STAGES)
    data = encode_leaf(leaf)
    # The proposal's fields as a leaf without a rule writes them, then the rule's, its domain first.
    assert data == encode_leaf(proposal()) + frame(rule_fields(TWO_STAGES))
    assert rule_fields(TWO_STAGES)[:5] == ["decisionflow.review-rule.v1", "record_support_review", "259200", "1", "2"]
    # docs/audit-log.md, "Leaves", gives this leaf's length and hash.
    assert len(encode_leaf(proposal())) == 494 and len(data) == 688
    assert leaf_hash(data).hex() == "f6877ea7a4908a5584316e5f8bd0e353392b2c75ff034a8c1cfa60c70967fb4b"
    assert decode_leaf(data) == leaf
    assert isinstance(leaf, ProposalLeaf) and leaf.review_rule() == TWO_STAGES


def test_a_proposal_leaf_without_rule_fields_follows_the_default_rule() -> None:
    decoded = decode_leaf(encode_leaf(proposal()))
    assert isinstance(decoded, ProposalLeaf) and decoded.rule is None
    assert decoded.review_rule() == default_rule("record_support_review")


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (default_rule("record_support_review"), "default rule"),
        (default_rule("refund"), "rule of 'refund'"),
    ],
)
def test_a_rule_an_encoder_does_not_write_is_refused_both_ways(rule: ReviewRule, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode_leaf(proposal(rule=rule))
    with pytest.raises(MalformedLeaf, match=message):
        decode_leaf(encode_leaf(proposal()) + frame(rule_fields(rule)))


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (["decisionflow.review-rule.v2"], "review rule is malformed"),
        (rule_fields(TWO_STAGES)[:-1], "review rule is malformed"),
        ([*rule_fields(TWO_STAGES), "x"], "more fields"),
    ],
)
def test_fields_after_the_policy_that_are_not_exactly_one_rule_are_refused(tail: list[str], message: str) -> None:
    with pytest.raises(MalformedLeaf, match=message):
        decode_leaf(encode_leaf(proposal()) + frame(tail))


def test_a_vote_leaf_is_its_documented_fields() -> None:
    data = encode_leaf(VoteLeaf(AT, OPERATION, "APPROVE", "lee", 1, ("finance", "support-leads")))
    assert data == frame(
        [
            "decisionflow.audit.leaf.v1",
            "vote",
            "2026-12-04T08:30:00.123456Z",
            OPERATION,
            "APPROVE",
            "lee",
            "1",
            "2",
            "finance",
            "support-leads",
        ]
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (["APPROVE", "lee", "0", "2", "support-leads", "finance"], "code point order"),
        (["APPROVE", "lee", "0", "2", "finance", "finance"], "code point order"),
        (["ABSTAIN", "lee", "0", "0"], "neither APPROVE nor DECLINE"),
        (["APPROVE", "lee", "01", "0"], "canonical"),
        (["APPROVE", "lee", "0", "1"], "fewer fields"),
    ],
)
def test_a_vote_leaf_no_encoder_writes_is_refused(fields: list[str], message: str) -> None:
    with pytest.raises(MalformedLeaf, match=message):
        decode_leaf(frame(["decisionflow.audit.leaf.v1", "vote", "2026-12-04T08:30:00.123456Z", OPERATION, *fields]))
    if message == "code point order":
        with pytest.raises(ValueError, match="code point order"):
            encode_leaf(VoteLeaf(AT, OPERATION, "APPROVE", "lee", 0, tuple(fields[4:])))


def test_sources_and_rules_are_written_in_one_order_whatever_the_order_given() -> None:
    reordered = proposal(
        evidence=EVIDENCE[::-1],
        policy=PolicyRef("support-replies", "2026-03", 9, dict(reversed(list(POLICY.rules.items())))),
    )
    assert encode_leaf(reordered) == encode_leaf(proposal())


def test_the_proposal_content_yields_its_operation_id() -> None:
    check_proposal(proposal())
    assert identities("T-1042", "record_support_review", BODY, EVIDENCE, POLICY).operation_id == OPERATION


@pytest.mark.parametrize(
    "changes",
    [
        {"body": BODY + " "},
        {"case_id": CaseId("T-1043")},
        {"evidence": EVIDENCE[:1]},
        {"policy": PolicyRef("support-replies", "2026-04", 9, POLICY.rules)},
    ],
)
def test_content_that_yields_another_operation_id_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(MalformedLeaf, match="yields"):
        check_proposal(proposal(**changes))


def _with_fields(*fields: str) -> bytes:
    return frame(fields)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a decisionflow.audit.leaf.v1 leaf"),
        (_with_fields("decisionflow.audit.leaf.v2", "expiry", "2026-12-04T08:30:00.123456Z", OPERATION), "not a"),
        (
            _with_fields("decisionflow.audit.leaf.v1", "ballot", "2026-12-04T08:30:00.123456Z", OPERATION),
            "unknown leaf kind",
        ),
        (_with_fields("decisionflow.audit.leaf.v1", "expiry", "2026-12-04T08:30:00Z", OPERATION), "RFC 3339"),
        (_with_fields("decisionflow.audit.leaf.v1", "expiry", "2026-12-04T08:30:00.123456Z"), "fewer fields"),
        (
            _with_fields("decisionflow.audit.leaf.v1", "expiry", "2026-12-04T08:30:00.123456Z", OPERATION, "x"),
            "more fields",
        ),
        (encode_leaf(ExpiryLeaf(AT, OPERATION))[:-1], "longer than the bytes left"),
        (encode_leaf(ExpiryLeaf(AT, OPERATION)) + b"\x00\x00", "cut short"),
        (struct.pack(">I", 1) + b"\xff", "not UTF-8"),
    ],
)
def test_bytes_no_encoder_writes_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(MalformedLeaf, match=message):
        decode_leaf(data)


def test_a_count_written_with_a_leading_zero_is_refused() -> None:
    fields = [
        "decisionflow.audit.leaf.v1",
        "proposal",
        "2026-12-04T08:30:00.123456Z",
        "started",
        "a",
        "T-1",
        OPERATION,
        "",
        "record_support_review",
        "body",
        "00",
        "p",
        "v",
        "0",
        "0",
    ]
    with pytest.raises(MalformedLeaf, match="canonical"):
        decode_leaf(frame(fields))


def clean(text: str) -> str:
    """Text as framing leaves it (line endings normalised), so a decoded leaf compares equal."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)


@given(
    principal=texts,
    body=texts,
    sources=st.lists(
        st.tuples(texts, st.integers(0, 2**63 - 1), texts),
        max_size=4,
        unique_by=lambda s: s[0].replace("\r\n", "\n").replace("\r", "\n"),
    ),
    rules=st.dictionaries(
        texts.map(lambda k: k.replace("\r", "")), texts.map(lambda v: v.replace("\r", "")), max_size=4
    ),
)
def test_any_proposal_round_trips(
    principal: str, body: str, sources: list[tuple[str, int, str]], rules: dict[str, str]
) -> None:
    evidence = tuple(EvidenceItem(clean(s), v, clean(q)) for s, v, q in sources)
    leaf = proposal(
        principal=clean(principal), body=clean(body), evidence=evidence, policy=PolicyRef("p", "v", 1, rules)
    )
    decoded = decode_leaf(encode_leaf(leaf))
    assert encode_leaf(decoded) == encode_leaf(leaf)
    assert decoded.principal == leaf.principal and decoded.body == leaf.body  # type: ignore[union-attr]
    assert sorted(decoded.evidence, key=lambda e: e.source_id) == sorted(evidence, key=lambda e: e.source_id)  # type: ignore[union-attr]
