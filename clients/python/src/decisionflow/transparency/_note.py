"""Signed notes (c2sp.org/signed-note): a text, a blank line, then one line per signature.

    <text ending in a newline>
    <blank line>
    — <key name> base64(key id, 4 bytes big-endian || Ed25519 signature of the text)
    ...

The whole note is UTF-8 with no control character but the newline; the text is everything before
the last blank line, its final newline included. Opening a note follows the specification's
rules for the verifier: signatures by keys the caller does not trust are kept aside and ignored;
every signature by a trusted key must verify, or the whole note is refused; and at least one must.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass

from decisionflow.transparency._errors import BadSignature, MalformedNote, UnknownKey
from decisionflow.transparency._keys import NoteSigner, NoteVerifier, is_key_name

MAX_SIGNATURES = 100
"""Signature lines read at most: the specification asks for at least 16; Go's note package allows 100."""

_DASH = "— "  # U+2014 EM DASH, then a space


@dataclass(frozen=True, slots=True)
class NoteSignature:
    """One signature line: the key's name and id, and the signature of the text (without the id)."""

    name: str
    key_id: int
    signature: bytes

    @property
    def line(self) -> str:
        """The signature line, newline included."""
        encoded = base64.b64encode(self.key_id.to_bytes(4, "big") + self.signature).decode()
        return f"{_DASH}{self.name} {encoded}\n"


@dataclass(frozen=True, slots=True)
class SignedNote:
    """A note as written: its text and every signature line, none of them checked."""

    text: str
    signatures: tuple[NoteSignature, ...]

    @property
    def message(self) -> str:
        """The note as text: the text, a blank line, the signature lines."""
        return self.text + "\n" + "".join(signature.line for signature in self.signatures)


@dataclass(frozen=True, slots=True)
class OpenedNote:
    """A note whose text a trusted key signed: verified holds those signatures, unverified the rest."""

    text: str
    verified: tuple[NoteSignature, ...]
    unverified: tuple[NoteSignature, ...]


def parse_note(message: str | bytes) -> SignedNote:
    """The text and signature lines of a signed note, checked for form only (no signature is verified)."""
    message = _text_of(message)
    split = message.rfind("\n\n")
    if split < 0:
        raise MalformedNote("no blank line before the signatures")
    text, block = message[: split + 1], message[split + 2 :]
    if not block:
        raise MalformedNote("no signature line")
    if not block.endswith("\n"):
        raise MalformedNote("the last signature line does not end in a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNote(f"{len(lines)} signature lines, more than {MAX_SIGNATURES}")
    return SignedNote(text, tuple(_signature(line) for line in lines))


def sign_note(text: str, *signers: NoteSigner) -> str:
    """The signed note of text (which must end in a newline) with one signature line per signer."""
    if not text.endswith("\n"):
        raise MalformedNote("the text does not end in a newline")
    _text_of(text)
    if not signers:
        raise MalformedNote("a note needs at least one signature")
    signed = text.encode()
    lines = (NoteSignature(signer.name, signer.key_id, signer.sign(signed)) for signer in signers)
    return SignedNote(text, tuple(dict.fromkeys(lines))).message


def open_note(message: str | bytes, verifiers: Iterable[NoteVerifier]) -> OpenedNote:
    """The note, once every signature by a trusted key verified and there was at least one."""
    note = parse_note(message)
    trusted = _by_key(verifiers)
    signed = note.text.encode()
    verified, unverified = [], []
    for signature in dict.fromkeys(note.signatures):  # a repeated line is checked once
        verifier = trusted.get((signature.name, signature.key_id))
        if verifier is None:
            unverified.append(signature)
        elif verifier.verifies(signed, signature.signature):
            verified.append(signature)
        else:
            raise BadSignature(signature.name, signature.key_id)
    if not verified:
        raise UnknownKey(tuple((signature.name, signature.key_id) for signature in unverified))
    return OpenedNote(note.text, tuple(verified), tuple(unverified))


def _text_of(message: str | bytes) -> str:
    if isinstance(message, bytes):
        try:
            message = message.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedNote("not UTF-8") from exc
    elif not message.isascii():
        try:
            message.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise MalformedNote("not UTF-8 (a lone surrogate)") from exc
    for character in message:
        if character < " " and character != "\n":
            raise MalformedNote(f"control character U+{ord(character):04X}")
    return message


def _signature(line: str) -> NoteSignature:
    if not line.startswith(_DASH):
        raise MalformedNote(f"{line[:40]!r} is not a signature line (— name signature)")
    name, _, encoded = line[len(_DASH) :].partition(" ")
    if not is_key_name(name):
        raise MalformedNote(f"{name!r} is not a key name")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise MalformedNote(f"the signature of {name} is not standard base64") from exc
    if len(raw) < 5:
        raise MalformedNote(f"the signature of {name} is {len(raw)} bytes; a key id and a signature are at least 5")
    return NoteSignature(name, int.from_bytes(raw[:4], "big"), raw[4:])


def _by_key(verifiers: Iterable[NoteVerifier]) -> dict[tuple[str, int], NoteVerifier]:
    # A key id is derived from the name and the key, so two keys share both only by a collision of
    # its 32 bits; the later one is then used, and the other's signatures fail as BadSignature.
    return {(verifier.name, verifier.key_id): verifier for verifier in verifiers}
