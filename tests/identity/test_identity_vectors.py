"""The framing vectors of docs/identities.md and the consequences the design says tests must show."""

from __future__ import annotations

import dataclasses

import pytest

from decisionflow.identity import (
    EvidenceItem,
    Identities,
    IdentityError,
    PolicyRef,
    evidence_id,
    frame,
    identities,
    is_operation_id,
    policy_id,
)

POLISH = "Proszę zebrać eksport diagnostyczny."

BODY = "Known firmware issue 4.2.1.\nPlease update to 4.2.2 and restart the device."
EVIDENCE = (
    EvidenceItem("kb-771", 3, "Firmware 4.2.1 drops the connection after sleep."),
    EvidenceItem("release-notes-4.2.2", 1, "Fixes reconnect after sleep."),
)
POLICY = PolicyRef("support-replies", "2026-03", 9, {"tone": "plain", "max_links": "2"})


@dataclasses.dataclass(frozen=True)
class Proposal:
    case_id: str = "T-1042"
    action: str = "record_support_review"
    body: str = BODY
    evidence: tuple[EvidenceItem, ...] = EVIDENCE
    policy: PolicyRef = POLICY

    def ids(self) -> Identities:
        return identities(self.case_id, self.action, self.body, self.evidence, self.policy)


BASE = Proposal()


@pytest.mark.parametrize(
    ("fields", "expected_hex"),
    [
        (["ab", "c"], "0000000261620000000163"),
        (["a", "bc"], "0000000161000000026263"),
        (["line one\r\nline two"], "000000116c696e65206f6e650a6c696e652074776f"),
        (["line one\nline two"], "000000116c696e65206f6e650a6c696e652074776f"),
    ],
)
def test_framing_vectors_hold_byte_for_byte(fields: list[str], expected_hex: str) -> None:
    assert frame(fields) == bytes.fromhex(expected_hex)


def test_polish_sentence_is_framed_by_its_utf8_length() -> None:
    framed = frame([POLISH])
    assert len(POLISH) == 36
    assert len(POLISH.encode("utf-8")) == 38
    assert len(framed) == 4 + 38
    assert framed.hex().startswith("0000002650726f737ac499")
    assert framed.hex().endswith("6e792e")
    assert framed[4:].decode("utf-8") == POLISH


def test_moving_a_boundary_between_fields_changes_the_frame() -> None:
    assert frame(["ab", "c"]) != frame(["a", "bc"])
    assert frame(["ab", "c"]) != frame(["abc"])
    assert frame([""]) != frame([])
    assert frame(["", ""]) != frame([""])


def test_lone_cr_crlf_and_lf_frame_the_same() -> None:
    assert frame(["a\rb\r\nc\nd"]) == frame(["a\nb\nc\nd"])
    # CR before CRLF is two line breaks, not one.
    assert frame(["a\r\r\nb"]) == frame(["a\n\nb"])
    assert frame(["a\n\rb"]) == frame(["a\n\nb"])


def test_lone_surrogate_is_refused() -> None:
    with pytest.raises(IdentityError):
        frame(["ok", "\ud800"])


def test_operation_id_has_its_documented_shape() -> None:
    ids = BASE.ids()
    assert is_operation_id(ids.operation_id)
    assert ids.evidence_id.startswith("ev-v1-") and len(ids.evidence_id) == 6 + 64
    assert ids.policy_id.startswith("pol-v1-") and len(ids.policy_id) == 7 + 64


def test_crlf_and_cr_in_the_body_do_not_change_the_operation_id() -> None:
    assert Proposal(body=BODY.replace("\n", "\r\n")).ids() == BASE.ids()
    assert Proposal(body=BODY.replace("\n", "\r")).ids() == BASE.ids()


def test_crlf_in_every_field_does_not_change_any_id() -> None:
    multiline = Proposal(
        case_id="T\n1",
        evidence=(EvidenceItem("kb\n1", 1, "a\nb"),),
        policy=PolicyRef("p\n", "v\n", 1, {"k\n": "v\n"}),
    )
    crlf = Proposal(
        case_id="T\r\n1",
        evidence=(EvidenceItem("kb\r1", 1, "a\r\nb"),),
        policy=PolicyRef("p\r", "v\r\n", 1, {"k\r\n": "v\r"}),
    )
    assert crlf.ids() == multiline.ids()


@pytest.mark.parametrize(
    ("original", "changed"),
    [
        ("restart the device.", "restart the device. "),  # trailing space
        ("Please update", "Please\u00a0update"),  # no-break space for a space
        ("Please update", "please update"),  # case
        ("restart the device.", "restart the device. 👍"),  # an emoji (astral plane)
        ("restart the device.", "restart the devicé."),  # composed é
        ("restart the device.", "restart the device\u0301."),  # e + combining acute
        ("restart the device.", "restart the device.\n"),  # trailing line break
        ("restart the device.", "restart the device. Then sign in again."),  # one added sentence
    ],
)
def test_any_change_other_than_line_endings_changes_the_operation_id(original: str, changed: str) -> None:
    assert original in BODY
    assert Proposal(body=BODY.replace(original, changed)).ids().operation_id != BASE.ids().operation_id


def test_nfc_and_nfd_are_different_bodies() -> None:
    composed = Proposal(body="café")
    decomposed = Proposal(body="cafe\u0301")
    assert composed.ids().operation_id != decomposed.ids().operation_id


def test_evidence_order_does_not_matter() -> None:
    reversed_evidence = Proposal(evidence=tuple(reversed(EVIDENCE)))
    assert reversed_evidence.ids() == BASE.ids()


def test_a_source_version_changes_evidence_and_operation_id_with_the_same_quotation() -> None:
    bumped = (dataclasses.replace(EVIDENCE[0], version=4), EVIDENCE[1])
    assert bumped[0].quotation == EVIDENCE[0].quotation
    changed = Proposal(evidence=bumped).ids()
    assert changed.evidence_id != BASE.ids().evidence_id
    assert changed.operation_id != BASE.ids().operation_id
    assert changed.policy_id == BASE.ids().policy_id


def test_the_allowance_changes_policy_and_operation_id_under_the_same_version_label() -> None:
    nine = Proposal(policy=dataclasses.replace(POLICY, allowance_units=9)).ids()
    ten = Proposal(policy=dataclasses.replace(POLICY, allowance_units=10)).ids()
    assert nine.policy_id != ten.policy_id
    assert nine.operation_id != ten.operation_id
    assert nine.evidence_id == ten.evidence_id


def test_version_zero_and_allowance_zero_are_valid() -> None:
    assert evidence_id([EvidenceItem("s", 0, "q")]) != evidence_id([EvidenceItem("s", 1, "q")])
    assert policy_id(PolicyRef("p", "v", 0)) != policy_id(PolicyRef("p", "v", 1))


def test_duplicate_source_id_is_refused() -> None:
    with pytest.raises(IdentityError, match="duplicate source_id"):
        evidence_id([EvidenceItem("kb", 1, "a"), EvidenceItem("kb", 2, "b")])


def test_source_ids_equal_after_line_ending_normalisation_are_duplicates() -> None:
    with pytest.raises(IdentityError, match="duplicate source_id"):
        evidence_id([EvidenceItem("kb\r", 1, "a"), EvidenceItem("kb\n", 1, "a")])


def test_sources_are_ordered_by_their_normalised_ids() -> None:
    # Raw order puts "a\nz" before "a\rb"; as framed, "a\nb" comes first.
    with_cr = [EvidenceItem("a\nz", 1, "q"), EvidenceItem("a\rb", 1, "r")]
    with_lf = [EvidenceItem("a\nz", 1, "q"), EvidenceItem("a\nb", 1, "r")]
    assert evidence_id(with_cr) == evidence_id(with_lf)


@pytest.mark.parametrize("bad", [-1, True, 2.0])
def test_negative_boolean_or_float_versions_and_allowances_are_refused(bad: object) -> None:
    with pytest.raises(IdentityError):
        evidence_id([EvidenceItem("s", bad, "q")])  # type: ignore[arg-type]
    with pytest.raises(IdentityError):
        policy_id(PolicyRef("p", "v", bad))  # type: ignore[arg-type]


def test_rules_order_does_not_matter_but_a_value_does() -> None:
    forward = PolicyRef("p", "v", 1, {"a": "1", "b": "2", "é": "3"})
    backward = PolicyRef("p", "v", 1, {"é": "3", "b": "2", "a": "1"})
    assert policy_id(forward) == policy_id(backward)
    assert policy_id(forward) != policy_id(PolicyRef("p", "v", 1, {"a": "1", "b": "20", "é": "3"}))
    assert policy_id(forward) != policy_id(PolicyRef("p", "v", 1, {"a": "1", "b": "2"}))


def test_rule_keys_equal_after_line_ending_normalisation_are_refused() -> None:
    with pytest.raises(IdentityError, match="duplicate rule key"):
        policy_id(PolicyRef("p", "v", 1, {"k\r\n": "1", "k\n": "2"}))


def test_rule_keys_are_ordered_by_their_normalised_form() -> None:
    with_cr = PolicyRef("p", "v", 1, {"k\nz": "1", "k\rb": "2"})
    with_lf = PolicyRef("p", "v", 1, {"k\nz": "1", "k\nb": "2"})
    assert policy_id(with_cr) == policy_id(with_lf)


def test_a_rule_and_a_field_cannot_trade_places() -> None:
    # Without framing, "ab" + "c" and "a" + "bc" would collide; the length prefix keeps them apart.
    assert policy_id(PolicyRef("p", "v", 1, {"ab": "c"})) != policy_id(PolicyRef("p", "v", 1, {"a": "bc"}))


@pytest.mark.parametrize("field", ["case_id", "action"])
def test_case_and_action_are_part_of_the_operation_id(field: str) -> None:
    changed = dataclasses.replace(BASE, **{field: getattr(BASE, field) + "x"})
    assert changed.ids().operation_id != BASE.ids().operation_id
