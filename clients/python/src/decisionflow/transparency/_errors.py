"""What does not hold when a proof, a note or a checkpoint is checked.

    TransparencyError            base (a ValueError): the input cannot be trusted as given
    ├── ProofError               a Merkle proof does not hold
    │   ├── InvalidTreeRange     the index or sizes name no proof: index ≥ size, size1 > size2, size1 = 0
    │   ├── WrongProofLength     expected, actual: the proof has the wrong number of hashes
    │   ├── MalformedHash        what, length: a leaf hash or proof hash that is not 32 bytes
    │   └── WrongRoot            tree_size, expected, computed: the proof leads to another root
    └── NoteError                a signed note or checkpoint is refused
        ├── MalformedNote        reason: not a signed note (c2sp.org/signed-note)
        ├── MalformedCheckpoint  reason: not a checkpoint text (c2sp.org/tlog-checkpoint)
        ├── MalformedKey         reason: not a verifier or signer key string
        ├── UnknownKey           signers: no signature is by a key the caller trusts
        ├── BadSignature         name, key_id: a trusted key's signature does not verify
        └── WrongOrigin          expected, found: the checkpoint is of another log

and, for the audit log's leaves (decisionflow.transparency._leaves and ._history):

    TransparencyError
    ├── MalformedLeaf            the bytes are not a leaf, or a proposal's content does not yield its id
    ├── HistoryError             index, reason: a leaf that does not decode or fit the leaves before it
    └── NotProven                the leaves hold, but do not show the proposal or decision asked for

A proof is refused before any hashing when its shape is wrong (range, length, hash sizes), so the
error says which part of the input to look at; WrongRoot is the one failure that needs the hashes.
"""

from __future__ import annotations


class TransparencyError(ValueError):
    """A proof, note or checkpoint does not hold; the subclass says what."""


class ProofError(TransparencyError):
    """A Merkle inclusion or consistency proof does not hold."""


class InvalidTreeRange(ProofError):
    """The leaf index or tree sizes name no proof (an index beyond the tree, a shrinking tree, an empty first tree)."""


class WrongProofLength(ProofError):
    """The proof has another number of hashes than its index and sizes call for."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"the proof has {actual} hashes, {expected} expected")
        self.expected = expected
        self.actual = actual


class MalformedHash(ProofError):
    """A leaf hash or proof hash is not a SHA-256 digest (32 bytes)."""

    def __init__(self, what: str, length: int) -> None:
        super().__init__(f"{what} is {length} bytes, not 32")
        self.what = what
        self.length = length


class WrongRoot(ProofError):
    """The proof leads to another root than the one expected for that tree size."""

    def __init__(self, tree_size: int, expected: bytes, computed: bytes) -> None:
        super().__init__(
            f"the proof leads to root {computed.hex()} of the tree of size {tree_size}, not {expected.hex()}"
        )
        self.tree_size = tree_size
        self.expected = expected
        self.computed = computed


class NoteError(TransparencyError):
    """A signed note or checkpoint is refused."""


class MalformedNote(NoteError):
    """The message is not a signed note: text, a blank line, then signature lines."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"malformed note: {reason}")
        self.reason = reason


class MalformedCheckpoint(NoteError):
    """The note text is not a checkpoint: origin, tree size, base64 root hash, extension lines."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"malformed checkpoint: {reason}")
        self.reason = reason


class MalformedKey(NoteError):
    """A verifier key (name+keyid+base64 key) or signer key string cannot be used."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"malformed key: {reason}")
        self.reason = reason


class UnknownKey(NoteError):
    """No signature on the note is by a trusted key; signers names the (name, key id) pairs that did sign."""

    def __init__(self, signers: tuple[tuple[str, int], ...]) -> None:
        named = ", ".join(f"{name}+{key_id:08x}" for name, key_id in signers) or "none"
        super().__init__(f"the note has no signature by a trusted key (signed by: {named})")
        self.signers = signers


class BadSignature(NoteError):
    """A signature by a trusted key does not verify: the note was altered or forged."""

    def __init__(self, name: str, key_id: int) -> None:
        super().__init__(f"the signature of {name}+{key_id:08x} does not verify")
        self.name = name
        self.key_id = key_id


class WrongOrigin(NoteError):
    """The checkpoint verified, but it is of another log than the one expected."""

    def __init__(self, expected: str, found: str) -> None:
        super().__init__(f"the checkpoint is of log {found!r}, not {expected!r}")
        self.expected = expected
        self.found = found
