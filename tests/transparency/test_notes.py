"""Signed notes and their keys against the published vectors: Go's note package tests (the
PeterNeumann and EnochRoot keys) and the example of c2sp.org/signed-note."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from decisionflow.transparency import (
    BadSignature,
    MalformedKey,
    MalformedNote,
    NoteSignature,
    NoteSigner,
    NoteVerifier,
    UnknownKey,
    key_id,
    open_note,
    parse_note,
    sign_note,
)
from tests.transparency.published import vectors

NOTES = vectors("notes")
GO = NOTES["go_note"]
C2SP = NOTES["c2sp_note"]
PETER = NoteVerifier.from_vkey(GO["peter_vkey"])
ENOCH = NoteVerifier.from_vkey(GO["enoch_vkey"])


def test_a_verifier_key_names_its_key_and_id_and_is_written_back_unchanged() -> None:
    assert (PETER.name, f"{PETER.key_id:08x}") == ("PeterNeumann", GO["peter_key_id"])
    assert (ENOCH.name, f"{ENOCH.key_id:08x}") == ("EnochRoot", GO["enoch_key_id"])
    assert PETER.vkey == GO["peter_vkey"]
    assert key_id(PETER.name, PETER.public_key) == int(GO["peter_key_id"], 16)


def test_the_signer_key_signs_the_quotation_exactly_as_published() -> None:
    signer = NoteSigner.from_skey(GO["peter_skey"])

    assert signer.verifier() == PETER
    assert sign_note(GO["text"], signer) == GO["signed"]
    assert "PRIVATE" not in repr(signer) and "private_key" not in repr(signer)


def test_the_published_note_opens_with_its_key() -> None:
    opened = open_note(GO["signed"], [PETER])

    assert opened.text == GO["text"]
    assert [(s.name, s.key_id) for s in opened.verified] == [("PeterNeumann", 0xC74F20A3)]
    assert opened.unverified == ()
    assert parse_note(GO["signed"]).message == GO["signed"]


def test_signatures_by_unknown_keys_are_kept_aside_and_a_note_needs_one_by_a_trusted_key() -> None:
    message = GO["text"] + "\n" + GO["peter_signature_line"] + GO["enoch_signature_line"]

    one = open_note(message, [PETER])
    both = open_note(message, [ENOCH, PETER])
    with pytest.raises(UnknownKey) as refused:
        open_note(message, [])

    assert [s.name for s in one.verified] == ["PeterNeumann"]
    assert [s.name for s in one.unverified] == ["EnochRoot"]
    assert [s.name for s in both.verified] == ["PeterNeumann", "EnochRoot"] and both.unverified == ()
    assert refused.value.signers == (("PeterNeumann", 0xC74F20A3), ("EnochRoot", 0xAF0CFE78))


def test_repeated_signature_lines_are_read_once() -> None:
    peter, enoch = GO["peter_signature_line"], GO["enoch_signature_line"]
    enoch_abcd = enoch[:60] + "ABCD" + enoch[60:]
    message = GO["text"] + "\n" + peter + peter + enoch + enoch + enoch_abcd

    opened = open_note(message, [PETER])

    assert len(opened.verified) == 1
    assert [line.line for line in opened.unverified] == [enoch, enoch_abcd]


def test_a_trusted_keys_signature_that_does_not_verify_refuses_the_whole_note() -> None:
    with pytest.raises(BadSignature) as refused:
        open_note(GO["invalid_signature"], [PETER])
    assert (refused.value.name, refused.value.key_id) == ("PeterNeumann", 0xC74F20A3)

    altered = GO["signed"].replace("problem is", "problem was")
    with pytest.raises(BadSignature):
        open_note(altered, [PETER, ENOCH])


def test_a_key_that_shares_only_the_name_or_only_the_id_of_a_trusted_key_is_ignored() -> None:
    [signature] = parse_note(GO["signed"]).signatures
    other_id = NoteSignature(signature.name, signature.key_id ^ 1, signature.signature)
    other_name = NoteSignature("PeterNeuman", signature.key_id, signature.signature)
    message = GO["text"] + "\n" + other_id.line + other_name.line

    with pytest.raises(UnknownKey):
        open_note(message, [PETER])


@pytest.mark.parametrize("case", GO["malformed"], ids=lambda case: case["why"])
def test_a_malformed_note_is_refused(case: dict[str, str]) -> None:
    message: str | bytes = case["message"] if "message" in case else bytes.fromhex(case["message_hex"])
    with pytest.raises(MalformedNote):
        open_note(message, [PETER])


def test_the_c2sp_example_note_opens_with_its_verifier_key() -> None:
    verifier = NoteVerifier.from_vkey(C2SP["vkey"])

    opened = open_note(C2SP["signed"], [verifier])

    assert opened.text == C2SP["text"]
    assert (verifier.name, verifier.key_id) == ("example.com/foo", 0x530D903A)
    assert open_note(C2SP["signed"].encode(), [verifier]) == opened


def _manglings(key_string: str) -> list[str]:
    # As Go's TestNewVerifier and TestNewSigner: every proper substring, and every one-byte change.
    raw = key_string.encode()
    substrings = {raw[i:j] for i in range(len(raw) + 1) for j in range(i + 1, len(raw) + 1)} - {raw}
    changed = {raw[:i] + bytes([raw[i] + 1]) + raw[i + 1 :] for i in range(len(raw))}
    return sorted(text.decode() for text in substrings | changed)


def test_a_mangled_verifier_key_is_refused() -> None:
    refused = 0
    for mangled in [*_manglings(GO["peter_vkey"]), *(bad["vkey"] for bad in GO["bad_vkeys"])]:
        with pytest.raises(MalformedKey):
            NoteVerifier.from_vkey(mangled)
        refused += 1
    assert refused > 2000


def test_a_mangled_signer_key_is_refused() -> None:
    refused = 0
    for mangled in _manglings(GO["peter_skey"]):
        with pytest.raises(MalformedKey):
            NoteSigner.from_skey(mangled)
        refused += 1
    assert refused > 3000


@pytest.mark.parametrize("name", ["", "a b", "a+b", "tab\there", "nbsp\u00a0", "ideographic\u3000space"])
def test_a_key_name_has_no_space_or_plus(name: str) -> None:
    with pytest.raises(MalformedKey):
        NoteVerifier(name, PETER.public_key)
    with pytest.raises(MalformedKey):
        NoteSigner.from_seed(name, b"\x01" * 32)


def test_a_fresh_key_signs_notes_its_verifier_key_string_opens() -> None:
    signer = NoteSigner("example.com/log", Ed25519PrivateKey.generate())
    text = "first line\n\nafter a blank line\n"

    message = sign_note(text, signer, NoteSigner.from_skey(GO["peter_skey"]))
    opened = open_note(message, [NoteVerifier.from_vkey(signer.verifier().vkey)])

    assert opened.text == text
    assert [s.name for s in opened.verified] == ["example.com/log"]
    assert [s.name for s in opened.unverified] == ["PeterNeumann"]
    assert parse_note(message).message == message


@pytest.mark.parametrize(
    "text", ["no final newline", "bell\x07\n", "tab\tin text\n", "\ud800 lone surrogate\n"], ids=repr
)
def test_a_text_that_no_note_can_hold_is_not_signed(text: str) -> None:
    with pytest.raises(MalformedNote):
        sign_note(text, NoteSigner.from_skey(GO["peter_skey"]))


def test_a_note_needs_a_signer() -> None:
    with pytest.raises(MalformedNote):
        sign_note("text\n")
