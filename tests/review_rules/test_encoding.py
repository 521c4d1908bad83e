"""A rule's canonical bytes: the vector of docs/review-rules.md holds byte for byte, every valid rule
round-trips, a rule's fields can be carried inside another record's, and anything ``encode_rule`` would
not have written is refused."""

from __future__ import annotations

import hashlib
import re
import struct
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decisionflow.identity import frame
from decisionflow.review_rules import (
    MalformedRule,
    ReviewRule,
    Stage,
    decode_rule,
    default_rule,
    encode_rule,
    parse_rules,
    rule_digest,
    rule_fields,
    rule_from_fields,
)
from tests.review_rules.strategies import rules

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "review-rules.md").read_text(encoding="utf-8")
REFUND = ReviewRule(
    "refund",
    (
        Stage("leads", ("support-leads",), 2, 1, timedelta(hours=4), ("on-call-leads",)),
        Stage("finance", ("finance",)),
    ),
    timedelta(hours=72),
)
REFUND_DIGEST = "rule-v1-b0f17bccf46a57cbd64cce3408e0c70f45f2efc194d16a12bc907f549a066478"
DEFAULT_DIGEST = "rule-v1-653535d0bbcc4759f8574cc5b77e777b803c679fa6bba30fedf4f1c34532c5e0"


def _section(heading: str) -> str:
    return PAGE.split(heading, 1)[1]


def test_the_refund_vector_holds_byte_for_byte() -> None:
    assert rule_fields(REFUND) == [
        "decisionflow.review-rule.v1",
        "refund",
        "259200",
        "1",
        "2",
        "leads",
        "2",
        "1",
        "14400",
        "1",
        "support-leads",
        "1",
        "on-call-leads",
        "finance",
        "1",
        "1",
        "",
        "1",
        "finance",
        "0",
    ]
    encoded = encode_rule(REFUND)
    assert len(encoded) == 179
    assert rule_digest(REFUND) == REFUND_DIGEST == "rule-v1-" + hashlib.sha256(encoded).hexdigest()


def test_the_documented_vector_is_the_documented_file_encoded() -> None:
    # The page's first TOML block is the refund file; its table frames each field; its digest follows.
    toml = re.search(r"```toml\n(.*?)```", PAGE, re.DOTALL)
    assert toml is not None
    assert parse_rules(toml.group(1), "page").rule_for("refund") == REFUND
    vector = _section("### The vector")
    framed = re.findall(r"^\| .+? \| `([0-9a-f]+)` \|$", vector, re.MULTILINE)
    assert bytes.fromhex("".join(framed)) == encode_rule(REFUND)
    assert REFUND_DIGEST in vector and "179 bytes" in vector


def test_the_documented_default_rule_holds() -> None:
    rule = default_rule("record_support_review")
    vector = _section("The default rule of `record_support_review`")
    hexed = re.search(r"```\n([0-9a-f]+)\n```", vector)
    assert hexed is not None
    assert bytes.fromhex(hexed.group(1)) == encode_rule(rule)
    assert rule_digest(rule) == DEFAULT_DIGEST and DEFAULT_DIGEST in vector


@given(rules())
def test_every_rule_round_trips(rule: ReviewRule) -> None:
    assert decode_rule(encode_rule(rule)) == rule
    assert rule_from_fields(rule_fields(rule)) == (rule, len(rule_fields(rule)))


@given(rules(), rules())
def test_two_rules_share_bytes_only_when_they_are_equal(first: ReviewRule, second: ReviewRule) -> None:
    assert (encode_rule(first) == encode_rule(second)) == (first == second)


@given(rules(), st.lists(st.text(max_size=3), max_size=3), st.lists(st.text(max_size=3), max_size=3))
def test_a_rule_carried_inside_a_record_is_read_from_its_place(
    rule: ReviewRule, before: list[str], after: list[str]
) -> None:
    fields = [*before, *rule_fields(rule), *after]
    assert rule_from_fields(fields, len(before)) == (rule, len(fields) - len(after))


def _fields(**changes: object) -> list[str]:
    fields = rule_fields(REFUND)
    for index, value in changes.items():
        fields[int(index.removeprefix("at"))] = str(value)
    return fields


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (_fields(at0="decisionflow.review-rule.v2"), "not a decisionflow.review-rule.v1 rule"),
        (_fields(at2="0259200"), "deadline '0259200' is not a canonical non-negative decimal"),
        (_fields(at2="+259200"), "deadline '+259200' is not a canonical non-negative decimal"),
        (_fields(at2="0"), "deadline: must be whole seconds from 1s to 365d"),
        (_fields(at3="true"), "distinct_across_stages 'true' is neither '1' nor '0'"),
        (_fields(at4="11"), "number of stages 11 is more than 10"),
        (_fields(at4="3"), "fewer fields than its counts call for"),
        (_fields(at4=""), "number of stages '' is not a canonical non-negative decimal"),
        (_fields(at6="0"), "approvals: must be a whole number from 1 to 100, not 0"),
        (_fields(at6="٣"), "stage 0 approvals '٣' is not a canonical non-negative decimal"),
        (_fields(at9="33"), "number of stage 0 groups 33 is more than 32"),
        (_fields(at5="leads", at13="leads"), "'leads' is already the name of stages[0]"),
        (_fields(at8=""), "escalate_to: needs due"),
        (_fields(at12="support-leads"), "'support-leads' is already one of the stage's groups"),
        ([*rule_fields(REFUND), ""], "more fields than its counts call for"),
    ],
)
def test_fields_another_encoder_would_not_write_are_refused(fields: list[str], reason: str) -> None:
    with pytest.raises(MalformedRule, match=re.escape(reason)):
        decode_rule(frame(fields))


def test_groups_out_of_order_are_refused_though_the_model_would_sort_them() -> None:
    stage = ["s", "1", "1", "60", "2", "b", "a", "0"]
    fields = ["decisionflow.review-rule.v1", "act", "", "1", "1", *stage]
    with pytest.raises(MalformedRule, match="out of code point order"):
        rule_from_fields(fields)
    stage[5:7] = ["a", "b"]
    assert rule_from_fields(["decisionflow.review-rule.v1", "act", "", "1", "1", *stage])[0].stages[0].groups == (
        "a",
        "b",
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (encode_rule(REFUND)[:-1], "a field is longer than the bytes left"),
        (encode_rule(REFUND) + b"\x00\x00", "a field's length prefix is cut short"),
        (encode_rule(REFUND)[:-5], "fewer fields than its counts call for"),
        (struct.pack(">I", 2) + b"\xff\xfe", "a field is not UTF-8"),
        (b"", "fewer fields than its counts call for"),
    ],
)
def test_bytes_that_are_not_framed_fields_of_a_rule_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(MalformedRule, match=re.escape(reason)):
        decode_rule(data)


@given(rules(), st.data())
def test_changed_bytes_are_refused_or_decode_to_another_rule(rule: ReviewRule, data: st.DataObject) -> None:
    encoded = bytearray(encode_rule(rule))
    position = data.draw(st.integers(0, len(encoded) - 1))
    encoded[position] = data.draw(st.integers(0, 255).filter(lambda value: value != encoded[position]))
    try:
        decoded = decode_rule(bytes(encoded))
    except MalformedRule:
        return
    # A change that still decodes (a letter of a name) is another rule, and exactly its encoding.
    assert decoded != rule
    assert encode_rule(decoded) == bytes(encoded)
