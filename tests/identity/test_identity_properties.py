"""Properties of framing, and the product checked against the independent implementation."""

from __future__ import annotations

import json
from collections.abc import Callable
from random import Random

from hypothesis import given, settings
from hypothesis import strategies as st

from decisionflow.identity import EvidenceItem, Identities, PolicyRef, frame, identities
from decisionflow_server.foundation.proposal_json import proposal_from_json
from tests.identity.identity_reference import (
    canonical_text,
    evidence_identity,
    framed,
    operation_identity,
    policy_identity,
    unframe,
)

# Characters from every plane (surrogates excluded: they are not text), weighted towards the
# ones the normalisation rule and the usual lookalikes are about; CR and LF twice so that
# CRLF, lone CR and LF mixtures are common. st.text over single characters keeps 1,000 examples fast.
_characters = st.one_of(
    st.sampled_from(["\r", "\n", "\r", "\n", " ", "\u00a0", "é", "e", "\u0301", "ę", "😀", "\x00"]),
    st.characters(codec="utf-8"),
    st.characters(min_codepoint=0x10000, codec="utf-8"),
)
texts = st.text(_characters, max_size=8)
# Short ids over a tiny alphabet share prefixes and differ only in line endings often, which is
# where sorting before or after normalisation would give different orders.
line_ending_ids = st.text(st.sampled_from("ab\r\n"), max_size=4)
ids = st.one_of(texts, line_ending_ids)
counts = st.one_of(st.just(0), st.integers(0, 10), st.integers(0, 2**64), st.integers(10**30, 10**40))
field_lists = st.lists(texts, max_size=6)

sources = st.lists(
    st.tuples(ids, counts, texts),
    max_size=4,
    unique_by=lambda source: canonical_text(source[0]),
)
rules = st.dictionaries(ids, texts, max_size=3).filter(
    lambda mapping: len({canonical_text(key) for key in mapping}) == len(mapping)
)


@given(field_lists)
def test_frame_decodes_back_to_the_normalised_fields(fields: list[str]) -> None:
    assert unframe(frame(fields)) == [canonical_text(text) for text in fields]


@given(field_lists, field_lists)
def test_distinct_normalised_field_lists_have_distinct_frames(first: list[str], second: list[str]) -> None:
    same_content = [canonical_text(t) for t in first] == [canonical_text(t) for t in second]
    assert (frame(first) == frame(second)) == same_content


@given(field_lists)
def test_product_frame_equals_reference_frame(fields: list[str]) -> None:
    assert frame(fields) == framed(fields)


def _restyle(text: str, random: Random) -> str:
    """The same text with each line break written as LF, CR or CRLF at random."""
    lines = canonical_text(text).split("\n")
    out = [lines[0]]
    previous_break = ""
    for line in lines[1:]:
        # CR, then an empty line, then LF would read as one CRLF break, not two.
        merges = previous_break == "\r" and out[-1] == ""
        previous_break = random.choice(["\r", "\r\n"] if merges else ["\n", "\r", "\r\n"])
        out += [previous_break, line]
    return "".join(out)


@given(field_lists, st.randoms(use_true_random=False))
def test_line_breaks_written_any_way_frame_the_same(fields: list[str], random: Random) -> None:
    assert frame([_restyle(text, random) for text in fields]) == frame(fields)


@given(
    evidence=sources,
    policy_rules=rules,
    body=texts,
    random=st.randoms(use_true_random=False),
)
def test_line_breaks_written_any_way_leave_every_identity_unchanged(
    evidence: list[tuple[str, int, str]], policy_rules: dict[str, str], body: str, random: Random
) -> None:
    def proposal_ids(restyle: Callable[[str], str]) -> Identities:
        return identities(
            restyle("T\n1042"),
            "record_support_review",
            restyle(body),
            [EvidenceItem(restyle(s), v, restyle(q)) for s, v, q in evidence],
            PolicyRef(restyle("p\n"), "v1", 9, {restyle(k): restyle(v) for k, v in policy_rules.items()}),
        )

    assert proposal_ids(lambda text: _restyle(text, random)) == proposal_ids(lambda text: text)


@settings(max_examples=1000, deadline=None)
@given(
    case_id=texts,
    action=st.one_of(st.just("record_support_review"), texts),
    body=st.text(_characters, max_size=24),
    evidence=sources,
    policy=st.tuples(texts, texts, counts, rules),
    ascii_json=st.booleans(),
    reverse_evidence=st.booleans(),
)
def test_product_matches_the_independent_implementation(
    case_id: str,
    action: str,
    body: str,
    evidence: list[tuple[str, int, str]],
    policy: tuple[str, str, int, dict[str, str]],
    ascii_json: bool,
    reverse_evidence: bool,
) -> None:
    name, version_label, allowance_units, policy_rules = policy
    expected_evidence = evidence_identity(evidence)
    expected_policy = policy_identity(name, version_label, allowance_units, policy_rules)
    expected_operation = operation_identity(case_id, action, body, expected_evidence, expected_policy)

    items = [EvidenceItem(source_id, version, quotation) for source_id, version, quotation in evidence]
    if reverse_evidence:
        items.reverse()
    policy_ref = PolicyRef(name, version_label, allowance_units, policy_rules)
    product = identities(case_id, action, body, items, policy_ref)
    assert (product.operation_id, product.evidence_id, product.policy_id) == (
        expected_operation,
        expected_evidence,
        expected_policy,
    )

    # The same proposal through JSON: astral characters arrive as surrogate-pair escapes when ascii_json.
    document = {
        "case_id": case_id,
        "action": action,
        "body": body,
        "evidence": [{"source_id": s, "version": v, "quotation": q} for s, v, q in evidence],
        "policy": {
            "name": name,
            "version_label": version_label,
            "allowance_units": allowance_units,
            "rules": policy_rules,
        },
    }
    parsed = proposal_from_json(json.dumps(document, ensure_ascii=ascii_json))
    assert identities(*parsed).operation_id == expected_operation
