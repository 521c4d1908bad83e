"""Checkpoints (c2sp.org/tlog-checkpoint) against the published texts, and signed and opened."""

from __future__ import annotations

import base64

import pytest

from decisionflow.transparency import (
    BadSignature,
    Checkpoint,
    MalformedCheckpoint,
    NoteSigner,
    NoteVerifier,
    UnknownKey,
    WrongOrigin,
    leaf_hash,
    open_checkpoint,
    parse_checkpoint,
    parse_note,
    sign_checkpoint,
)
from tests.transparency.published import vectors

NOTES = vectors("notes")
TREE = vectors("reference_tree")
GO_TREE = NOTES["go_tree"]
SIGNER = NoteSigner.from_skey(NOTES["go_note"]["peter_skey"])
ROOT8 = bytes.fromhex(TREE["roots"]["8"])


def test_gos_tree_text_is_a_checkpoint_of_its_origin_size_and_root() -> None:
    checkpoint = parse_checkpoint(GO_TREE["text"])

    assert checkpoint == Checkpoint(GO_TREE["origin"], GO_TREE["size"], leaf_hash(GO_TREE["leaf_data"].encode()))
    assert checkpoint.text == GO_TREE["text"]


@pytest.mark.parametrize("text", GO_TREE["malformed"])
def test_gos_malformed_tree_texts_are_refused(text: str) -> None:
    with pytest.raises(MalformedCheckpoint):
        parse_checkpoint(text)


def test_the_c2sp_example_checkpoint_parses_and_is_refused_without_its_key() -> None:
    example = NOTES["c2sp_checkpoint"]

    checkpoint = parse_checkpoint(parse_note(example["signed"]).text)
    with pytest.raises(UnknownKey) as refused:
        open_checkpoint(example["signed"], [SIGNER.verifier()])

    assert (checkpoint.origin, checkpoint.size) == (example["origin"], example["size"])
    assert base64.b64encode(checkpoint.root_hash).decode() == example["root_base64"]
    assert [name for name, _ in refused.value.signers] == [example["origin"]]


def test_a_signed_checkpoint_opens_with_the_logs_verifier_key_and_origin() -> None:
    checkpoint = Checkpoint("PeterNeumann", 8, ROOT8, ("extension one", "two"))

    signed = sign_checkpoint(checkpoint, SIGNER)
    verifier = NoteVerifier.from_vkey(NOTES["go_note"]["peter_vkey"])

    assert signed.startswith("PeterNeumann\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\nextension one\ntwo\n\n— ")
    assert open_checkpoint(signed, [verifier], origin="PeterNeumann") == checkpoint
    assert open_checkpoint(signed, [verifier]) == checkpoint
    with pytest.raises(WrongOrigin) as refused:
        open_checkpoint(signed, [verifier], origin="example.com/other-log")
    assert (refused.value.expected, refused.value.found) == ("example.com/other-log", "PeterNeumann")
    with pytest.raises(BadSignature):
        open_checkpoint(signed.replace("\n8\n", "\n9\n"), [verifier])


@pytest.mark.parametrize(
    "text",
    [
        "origin\n8\n",
        "origin\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=",
        "\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n08\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n+8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n 8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n\u0668\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n1_0\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n18446744073709551616\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyh=\n",
        "origin\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQ==\n",
        "origin\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz-Nw7_RgQyg=\n",
        "origin\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n\n",
        "origin\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\nextension\n\nafter a blank\n",
    ],
    ids=[
        "two lines",
        "no final newline",
        "empty origin",
        "leading zero",
        "plus sign",
        "space",
        "arabic digit",
        "underscore",
        "size beyond 64 bits",
        "non-canonical base64",
        "31-byte root",
        "url-safe base64",
        "empty extension line",
        "blank line among extensions",
    ],
)
def test_a_text_that_is_not_a_checkpoint_is_refused(text: str) -> None:
    with pytest.raises(MalformedCheckpoint):
        parse_checkpoint(text)


def test_the_empty_tree_and_the_largest_size_are_checkpoints() -> None:
    empty = parse_checkpoint("origin\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n")
    largest = Checkpoint("origin", 2**64 - 1, ROOT8)

    assert empty.size == 0 and empty.root_hash.hex() == TREE["empty_root"]
    assert parse_checkpoint(largest.text) == largest


@pytest.mark.parametrize(
    ("origin", "size", "root", "extensions"),
    [
        ("", 8, ROOT8, ()),
        ("two\nlines", 8, ROOT8, ()),
        ("origin", -1, ROOT8, ()),
        ("origin", 2**64, ROOT8, ()),
        ("origin", 8, ROOT8[:31], ()),
        ("origin", 8, ROOT8, ("",)),
        ("origin", 8, ROOT8, ("tab\there",)),
    ],
)
def test_a_checkpoint_that_no_text_can_state_is_not_made(
    origin: str, size: int, root: bytes, extensions: tuple[str, ...]
) -> None:
    with pytest.raises(MalformedCheckpoint):
        Checkpoint(origin, size, root, extensions)
