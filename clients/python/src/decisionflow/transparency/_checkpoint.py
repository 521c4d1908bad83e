"""Checkpoints (c2sp.org/tlog-checkpoint): a log's size and root, as the text of a signed note.

    <origin>                  the log's identity, one non-empty line
    <tree size>               ASCII decimal, no leading zero (0 for the empty tree)
    <root hash>               standard base64 of the 32-byte RFC 6962 root
    <extension line>...       optional, each non-empty
    (blank line, then the signature lines of c2sp.org/signed-note)

A log signs a checkpoint with a key whose name should be its origin; an auditor opens it with the
log's verifier key and, when it knows which log it audits, the origin it expects.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass

from decisionflow.transparency._errors import MalformedCheckpoint, WrongOrigin
from decisionflow.transparency._hashing import HASH_SIZE
from decisionflow.transparency._keys import NoteSigner, NoteVerifier
from decisionflow.transparency._note import open_note, sign_note

MAX_TREE_SIZE = 2**64 - 1
"""The largest tree size a checkpoint may state (RFC 9162 sizes are 64-bit)."""

_DECIMAL = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A log's signed statement of its tree: origin, size, root hash and any extension lines."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for what, line in (("origin", self.origin), *(("an extension line", line) for line in self.extensions)):
            if not line:
                raise MalformedCheckpoint(f"{what} is empty")
            if any(character < " " for character in line):
                raise MalformedCheckpoint(f"{what} holds a control character or newline")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise MalformedCheckpoint(f"tree size {self.size} is not between 0 and 2^64 - 1")
        if len(self.root_hash) != HASH_SIZE:
            raise MalformedCheckpoint(f"the root hash is {len(self.root_hash)} bytes, not 32")

    @property
    def text(self) -> str:
        """The note text: origin, size, base64 root hash, extension lines, each ending in a newline."""
        lines = (self.origin, str(self.size), base64.b64encode(self.root_hash).decode(), *self.extensions)
        return "".join(line + "\n" for line in lines)


def parse_checkpoint(text: str) -> Checkpoint:
    """The checkpoint a note text states (the text alone: a signature is checked by open_checkpoint)."""
    if not text.endswith("\n"):
        raise MalformedCheckpoint("the text does not end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise MalformedCheckpoint(f"{len(lines)} lines, at least 3 expected (origin, size, root hash)")
    origin, size, root, *extensions = lines
    if not _DECIMAL.fullmatch(size):
        raise MalformedCheckpoint(f"tree size {size[:40]!r} is not a decimal without leading zeros")
    return Checkpoint(origin, int(size), _root_hash(root), tuple(extensions))


def sign_checkpoint(checkpoint: Checkpoint, *signers: NoteSigner) -> str:
    """The checkpoint as a signed note, one signature line per signer (the log's key first)."""
    return sign_note(checkpoint.text, *signers)


def open_checkpoint(
    message: str | bytes, verifiers: Iterable[NoteVerifier], *, origin: str | None = None
) -> Checkpoint:
    """The checkpoint of a signed note that a trusted key signed (and of the origin expected, if given)."""
    checkpoint = parse_checkpoint(open_note(message, verifiers).text)
    if origin is not None and checkpoint.origin != origin:
        raise WrongOrigin(origin, checkpoint.origin)
    return checkpoint


def _root_hash(line: str) -> bytes:
    try:
        root = base64.b64decode(line, validate=True)
    except binascii.Error as exc:
        raise MalformedCheckpoint(f"root hash {line[:60]!r} is not standard base64") from exc
    # Only the canonical encoding: one root hash, one way to write it.
    if base64.b64encode(root).decode() != line:
        raise MalformedCheckpoint(f"root hash {line[:60]!r} is not canonical base64")
    if len(root) != HASH_SIZE:
        raise MalformedCheckpoint(f"the root hash is {len(root)} bytes, not 32")
    return root
