"""Verify a bundle offline, with nothing but the log's verifier keys (and, optionally, an older checkpoint).

The checks, in the order they run; the first that does not hold ends the verification, naming the
checkpoint, the leaf (by index) or the operation's record it concerns:

    checkpoint   the bundle is of the origin pinned (when the auditor pins one); the signed note
                 opens with a trusted key (at least one trusted signature, every one verifies) and
                 is of the bundle's origin
    since        the older checkpoint (the auditor's --since file, else the bundle's own) opens with
                 a trusted key (after a rotation, the old one) and the bundle's consistency proof
                 links it to the bundle's checkpoint; a whole-log bundle needs no carried proof:
                 its leaves are checked against the older root below
    leaf N       in index order: below the checkpoint's size, after the leaf before (for the whole
                 log: exactly N, nothing missing); its bytes and proof are base64; the proof leads
                 to the signed root; it decodes; it fits the leaves before (History: a proposal's
                 content yields its id, a decision follows its proposal and is the only one, an
                 effect follows an approval); it is of the bundle's scope
    checkpoint   for the whole log: every leaf is there and together they hash to the signed root
    since        for the whole log without a carried proof: the first leaves hash to the older root
    record       one record for each operation of the scope, each agreeing with the leaves (the
                 decision, the reviewer, the receipt): ``_records`` says exactly what that proves
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass, field

from decisionflow.audit_bundle._format import Bundle, BundleLeaf
from decisionflow.audit_bundle._records import check_records
from decisionflow.audit_bundle._trust import BundleRefused, Opened, Trust, check_extends, open_trusted
from decisionflow.transparency import (
    Checkpoint,
    History,
    HistoryError,
    Leaf,
    NoteVerifier,
    ProofError,
    leaf_hash,
    tree_hash,
    verify_inclusion,
)

__all__ = ["BundleProof", "BundleRefused", "verify_bundle"]


@dataclass(frozen=True, slots=True)
class BundleProof:
    """What a bundle proved: its scope, the checkpoint and who signed it, the leaves, the consistency, the records."""

    origin: str
    tree_size: int
    root_hash: bytes
    key: str
    whole_log: bool
    leaves: int
    kinds: dict[str, int] = field(default_factory=dict)
    operations: int = 0
    since_size: int | None = None
    records: int = 0
    scope: dict[str, str | bool] = field(default_factory=dict)
    origin_pinned: bool = False
    since_key: str | None = None
    since_proven_by: str | None = None
    """How the older checkpoint was linked to this one: "consistency proof" (carried) or "leaves"."""


def _decoded(text: str, index: int, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise BundleRefused("leaf", f"leaf {index}", f"its {what} is not base64", index) from None


@dataclass(frozen=True, slots=True)
class _Older:
    """The older checkpoint opened, where it came from, and the carried proof from it (None: none of its size)."""

    opened: Opened
    where: str
    proof: list[bytes] | None


def _older(bundle: Bundle, trust: Trust, origin: str, older: str | None) -> _Older | None:
    carried = None
    if bundle.since is not None:
        carried = open_trusted(bundle.since.checkpoint, trust, origin, "since", "the bundle's since checkpoint")
    if older is None and carried is None:
        return None
    where = "the --since checkpoint" if older is not None else "the bundle's since checkpoint"
    old = open_trusted(older, trust, origin, "since", where) if older is not None else carried
    assert old is not None
    proof = None
    if bundle.since is not None and carried is not None and carried.checkpoint.size == old.checkpoint.size:
        proof = [_since_hash(text, where) for text in bundle.since.proof]
    return _Older(old, where, proof)


def _since_hash(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise BundleRefused("since", where, "a consistency proof hash is not base64") from None


def _extends_by_proof(older: _Older, bundle: Bundle, checkpoint: Checkpoint) -> bool:
    """Check the carried proof now; False when the leaves must prove it (a whole-log bundle carrying none)."""
    old = older.opened.checkpoint
    if older.proof is None and old.size != checkpoint.size:
        if bundle.whole_log and old.size < checkpoint.size:
            return False
        if old.size > checkpoint.size:
            reason = f"checkpoint {checkpoint.size} does not extend it: it covers {old.size} leaves"
            raise BundleRefused("since", older.where, reason)
        reason = (
            f"the bundle carries no consistency proof from size {old.size} (export it with --since that checkpoint)"
        )
        raise BundleRefused("since", older.where, reason)
    check_extends(old, checkpoint, older.proof or [], older.where)
    return True


def _extends_by_leaves(older: _Older, hashes: list[bytes], checkpoint: Checkpoint) -> None:
    """For a whole-log bundle whose leaves all hold (older and smaller): its first leaves hash to the older root."""
    old = older.opened.checkpoint
    if tree_hash(hashes[: old.size]) != old.root_hash:
        reason = f"checkpoint {checkpoint.size} does not extend it: its first {old.size} leaves hash to another root"
        raise BundleRefused("since", older.where, reason)


class _Reader:
    """The leaves of one bundle, read in order against its checkpoint."""

    def __init__(self, bundle: Bundle, checkpoint: Checkpoint) -> None:
        self.bundle = bundle
        self.checkpoint = checkpoint
        self.history = History()
        self.hashes: list[bytes] = []
        self.last: int | None = None

    def read(self, position: int, entry: BundleLeaf) -> None:
        index = entry.index
        where = f"leaf {index}"
        if self.bundle.whole_log and index != position:
            reason = f"it is missing (the bundle has leaf {index} in its place)"
            raise BundleRefused("leaf", f"leaf {position}", reason, position)
        if self.last is not None and index <= self.last:
            raise BundleRefused("leaf", where, f"it comes after leaf {self.last}: leaves are in index order", index)
        self.last = index
        if not 0 <= index < self.checkpoint.size:
            raise BundleRefused("leaf", where, f"it is not in the tree of {self.checkpoint.size} leaves", index)
        data = _decoded(entry.data, index, "data")
        proof = [_decoded(text, index, "proof") for text in entry.proof]
        try:
            verify_inclusion(index, self.checkpoint.size, leaf_hash(data), proof, self.checkpoint.root_hash)
        except ProofError as refused:
            raise BundleRefused("leaf", where, f"its inclusion proof does not hold: {refused}", index) from refused
        try:
            leaf = self.history.read(index, data)
        except HistoryError as refused:
            raise BundleRefused("leaf", where, refused.reason, index) from refused
        self._in_scope(index, leaf)
        self.hashes.append(leaf_hash(data))

    def _in_scope(self, index: int, leaf: Leaf) -> None:
        scope = self.bundle.scope
        if "operation_id" in scope and leaf.operation_id != scope["operation_id"]:
            reason = f"it is of {leaf.operation_id}, not of the bundle's operation"
            raise BundleRefused("leaf", f"leaf {index}", reason, index)
        proposal = self.history.operations[leaf.operation_id].proposal
        if "case_id" in scope and proposal.case_id != scope["case_id"]:
            raise BundleRefused(
                "leaf", f"leaf {index}", f"it is of case {proposal.case_id}, not of the bundle's case", index
            )

    def whole(self) -> None:
        size = self.checkpoint.size
        if len(self.hashes) != size:
            missing = len(self.hashes)
            raise BundleRefused(
                "leaf", f"leaf {missing}", f"it is missing: the checkpoint covers {size} leaves", missing
            )
        if tree_hash(self.hashes) != self.checkpoint.root_hash:
            raise BundleRefused("leaf", f"checkpoint {size}", "the leaves do not hash to its root")


def verify_bundle(
    bundle: Bundle,
    keys: NoteVerifier | Iterable[NoteVerifier],
    *,
    since: str | None = None,
    origin: str | None = None,
    records: bool = True,
) -> BundleProof:
    """Return what the bundle proves; raise BundleRefused naming the first part that does not hold.

    keys are the log's verifier keys the auditor trusts (several across a key rotation). since is an
    older signed checkpoint the auditor kept; without it, the bundle's own older checkpoint (if it
    carries one) is checked the same way. origin pins the log's origin; without it, the bundle's is
    taken. records=False checks the leaves alone (the records are then neither read nor counted).
    """
    trust = Trust.of(keys, origin)
    trusted_origin = trust.origin_of(bundle.origin)
    opened = open_trusted(bundle.checkpoint, trust, trusted_origin, "checkpoint", "checkpoint")
    checkpoint = opened.checkpoint
    older = _older(bundle, trust, trusted_origin, since)
    proven_by = None
    if older is not None and _extends_by_proof(older, bundle, checkpoint):
        proven_by = "consistency proof"
    reader = _Reader(bundle, checkpoint)
    for position, entry in enumerate(bundle.leaves):
        reader.read(position, entry)
    if bundle.whole_log:
        reader.whole()
        if older is not None and proven_by is None:
            _extends_by_leaves(older, reader.hashes, checkpoint)
            proven_by = "leaves"
    elif not bundle.leaves:
        raise BundleRefused("leaf", "leaves", "the bundle holds no leaf of its operation or case")
    scoped = bundle.scope.get("operation_id")
    agreeing = check_records(bundle.records, None if scoped is None else str(scoped), reader.history) if records else 0
    return BundleProof(
        origin=checkpoint.origin,
        tree_size=checkpoint.size,
        root_hash=checkpoint.root_hash,
        key=opened.key,
        whole_log=bundle.whole_log,
        leaves=len(bundle.leaves),
        kinds=dict(reader.history.kinds),
        operations=len(reader.history.operations),
        since_size=None if older is None else older.opened.checkpoint.size,
        records=agreeing,
        scope=dict(bundle.scope),
        origin_pinned=origin is not None,
        since_key=None if older is None else older.opened.key,
        since_proven_by=proven_by,
    )
