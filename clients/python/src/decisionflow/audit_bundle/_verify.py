"""Verify a bundle offline, with nothing but the log's verifier key (and, optionally, an older checkpoint).

The checks, in the order they run; the first that does not hold ends the verification, naming the
checkpoint, the leaf (by index) or the operation's record it concerns:

    checkpoint   the signed note opens with the key (a trusted signature that verifies) and is of
                 the bundle's origin
    since        the older checkpoint (the auditor's --since file, else the bundle's own) opens with
                 the key and the consistency proof links it to the bundle's checkpoint
    leaf N       in index order: below the checkpoint's size, after the leaf before (for the whole
                 log: exactly N, nothing missing); its bytes and proof are base64; the proof leads
                 to the signed root; it decodes; it fits the leaves before (History: a proposal's
                 content yields its id, a decision follows its proposal and is the only one, an
                 effect follows an approval); it is of the bundle's scope
    checkpoint   for the whole log: every leaf is there and together they hash to the signed root
    record       each orchestrator record agrees with the leaves: a decision and its reviewer as
                 logged, a receipt as logged, no decision the log does not hold, no record missing
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field

from decisionflow.audit_bundle._format import Bundle, BundleLeaf, Record
from decisionflow.transparency import (
    Checkpoint,
    History,
    HistoryError,
    Leaf,
    LoggedOperation,
    NoteVerifier,
    ProofError,
    TransparencyError,
    leaf_hash,
    open_checkpoint,
    tree_hash,
    verify_consistency,
    verify_inclusion,
)
from decisionflow.vocabulary import OperationId


class BundleRefused(ValueError):
    """A part of the bundle does not hold: what ("checkpoint", "since", "leaf", "record"), where, why."""

    def __init__(self, what: str, where: str, reason: str, index: int | None = None) -> None:
        super().__init__(f"{where}: {reason}")
        self.what = what
        self.where = where
        self.reason = reason
        self.index = index


@dataclass(frozen=True, slots=True)
class BundleProof:
    """What a bundle proved: the checkpoint, the leaves and their kinds, the consistency and the records."""

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


def _opened(note: str, key: NoteVerifier, origin: str, what: str, where: str) -> Checkpoint:
    try:
        return open_checkpoint(note, [key], origin=origin)
    except TransparencyError as refused:
        raise BundleRefused(what, where, str(refused)) from refused


def _decoded(text: str, index: int, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise BundleRefused("leaf", f"leaf {index}", f"its {what} is not base64", index) from None


def _since(bundle: Bundle, key: NoteVerifier, checkpoint: Checkpoint, older: str | None) -> int | None:
    carried = None
    if bundle.since is not None:
        carried = _opened(bundle.since.checkpoint, key, bundle.origin, "since", "the bundle's since checkpoint")
    if older is None and carried is None:
        return None
    where = "the --since checkpoint" if older is not None else "the bundle's since checkpoint"
    old = _opened(older, key, bundle.origin, "since", where) if older is not None else carried
    assert old is not None
    proof: list[bytes] = []
    if bundle.since is not None and carried is not None and carried.size == old.size:
        proof = [_since_hash(text, where) for text in bundle.since.proof]
    elif old.size != checkpoint.size:
        reason = (
            f"the bundle carries no consistency proof from size {old.size} (export it with --since that checkpoint)"
        )
        raise BundleRefused("since", where, reason)
    try:
        verify_consistency(old.size, checkpoint.size, proof, old.root_hash, checkpoint.root_hash)
    except TransparencyError as refused:
        raise BundleRefused("since", where, f"checkpoint {checkpoint.size} does not extend it: {refused}") from refused
    return old.size


def _since_hash(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise BundleRefused("since", where, "a consistency proof hash is not base64") from None


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


def _record_finding(record: Record, logged: LoggedOperation | None) -> BundleRefused | None:
    where = f"record of {record.operation_id}"
    if not record.found:
        first = None if logged is None else min(logged.leaves)
        return BundleRefused("record", where, "the orchestrator has no record of an operation the log holds", first)
    decided = record.decision in ("APPROVE", "DECLINE")
    leaf = None if logged is None else logged.decision
    if leaf is None:
        if decided:
            reason = (
                f"the orchestrator records {record.decision} by {record.reviewer!r}, but no decision leaf of it is in "
                "the bundle (decided after the checkpoint: export again once a later one covers it)"
            )
            return BundleRefused("record", where, reason)
        return None
    index = logged.decision_index if logged is not None else None
    if (record.decision, record.reviewer) != (leaf.decision, leaf.principal):
        now = f"{record.decision} by {record.reviewer!r}" if decided else "no decision"
        reason = f"the orchestrator now records {now}, the leaf {leaf.decision} by {leaf.principal!r}"
        return BundleRefused("leaf", f"leaf {index}", reason, index)
    receipts = {effect.receipt_id for effect in logged.effects} if logged is not None else set()
    if record.receipt_id and receipts and record.receipt_id not in receipts:
        reason = f"the orchestrator records receipt {record.receipt_id!r}, the log {sorted(receipts)}"
        return BundleRefused("record", where, reason, index)
    return None


def _records(bundle: Bundle, history: History) -> int:
    findings = [
        finding
        for record in bundle.records
        if (finding := _record_finding(record, history.operations.get(OperationId(record.operation_id)))) is not None
    ]
    if findings:
        # The first in the log's order; a record no leaf answers comes after those that name one.
        raise min(findings, key=lambda f: (f.index is None, f.index or 0))
    return len(bundle.records)


def verify_bundle(bundle: Bundle, key: NoteVerifier, *, since: str | None = None) -> BundleProof:
    """Return what the bundle proves; raise BundleRefused naming the first part that does not hold.

    since is an older signed checkpoint the auditor kept; without it, the bundle's own older
    checkpoint (if it carries one) is checked the same way.
    """
    checkpoint = _opened(bundle.checkpoint, key, bundle.origin, "checkpoint", "checkpoint")
    since_size = _since(bundle, key, checkpoint, since)
    reader = _Reader(bundle, checkpoint)
    for position, entry in enumerate(bundle.leaves):
        reader.read(position, entry)
    if bundle.whole_log:
        reader.whole()
    elif not bundle.leaves:
        raise BundleRefused("leaf", "leaves", "the bundle holds no leaf of its operation or case")
    records = _records(bundle, reader.history)
    return BundleProof(
        origin=checkpoint.origin,
        tree_size=checkpoint.size,
        root_hash=checkpoint.root_hash,
        key=key.vkey,
        whole_log=bundle.whole_log,
        leaves=len(bundle.leaves),
        kinds=dict(reader.history.kinds),
        operations=len(reader.history.operations),
        since_size=since_size,
        records=records,
    )
