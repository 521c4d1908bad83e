"""What an auditor trusts, and the checkpoints opened with it: the log's verifier keys and, when pinned, its origin.

An auditor may trust several keys at once: after the log's key is rotated, checkpoints signed before
carry the old key's signature and those signed after the new key's, and a consistency proof links
the one to the other. A checkpoint opens when at least one trusted key signed it and every trusted
key's signature on it verifies (``open_note``); the key that opened it is reported, so that a
verification says which key vouched for which checkpoint.

The origin is pinned by the auditor (``--origin``) or taken from the bundle. Unpinned, a log that
signs checkpoints of another origin with the same key would pass; pinned, a checkpoint or bundle of
any other origin is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from decisionflow.transparency import (
    Checkpoint,
    NoteVerifier,
    TransparencyError,
    WrongOrigin,
    open_note,
    parse_checkpoint,
    verify_consistency,
)


class BundleRefused(ValueError):
    """A part of the bundle does not hold: what ("checkpoint", "since", "leaf", "record"), where, why."""

    def __init__(self, what: str, where: str, reason: str, index: int | None = None) -> None:
        super().__init__(f"{where}: {reason}")
        self.what = what
        self.where = where
        self.reason = reason
        self.index = index


@dataclass(frozen=True, slots=True)
class Trust:
    """The verifier keys an auditor trusts (one or several, in any order) and the origin pinned, if any."""

    keys: tuple[NoteVerifier, ...]
    origin: str | None = None

    @classmethod
    def of(cls, keys: NoteVerifier | Iterable[NoteVerifier], origin: str | None = None) -> Trust:
        """Trust the keys given (one key or several) and, when given, only checkpoints of origin."""
        trusted = (keys,) if isinstance(keys, NoteVerifier) else tuple(dict.fromkeys(keys))
        if not trusted:
            raise ValueError("no verifier key to trust")
        return cls(trusted, origin)

    def origin_of(self, bundle_origin: str) -> str:
        """The origin every checkpoint must be of: the pinned one; refused when the bundle names another."""
        if self.origin is not None and bundle_origin != self.origin:
            reason = f"the bundle is of origin {bundle_origin!r}, not of {self.origin!r} (--origin)"
            raise BundleRefused("checkpoint", "checkpoint", reason)
        return bundle_origin


@dataclass(frozen=True, slots=True)
class Opened:
    """A checkpoint opened with a trusted key, and the verifier key string of the key that signed it."""

    checkpoint: Checkpoint
    key: str


def open_trusted(note: str, trust: Trust, origin: str, what: str, where: str) -> Opened:
    """The checkpoint of note, opened with the trusted keys and of origin; BundleRefused (what, where) if not."""
    try:
        opened = open_note(note, trust.keys)
        checkpoint = parse_checkpoint(opened.text)
        if checkpoint.origin != origin:
            raise WrongOrigin(origin, checkpoint.origin)
    except TransparencyError as refused:
        raise BundleRefused(what, where, str(refused)) from refused
    by_id = {(key.name, key.key_id): key for key in trust.keys}
    signer = next(by_id[(s.name, s.key_id)] for s in opened.verified)
    return Opened(checkpoint, signer.vkey)


def check_extends(old: Checkpoint, new: Checkpoint, proof: Sequence[bytes], where: str) -> None:
    """BundleRefused ("since", where) unless the consistency proof shows that new extends old."""
    try:
        verify_consistency(old.size, new.size, list(proof), old.root_hash, new.root_hash)
    except TransparencyError as refused:
        raise BundleRefused("since", where, f"checkpoint {new.size} does not extend it: {refused}") from refused
