"""Exporting a bundle: the calls ``decisionflow audit export`` and the console's audit page make, and the
bundle built from their answers, in this order:

    1. GetCheckpoint: the latest signed checkpoint; the bundle is of its tree size;
    2. the scope's leaves with their inclusion proofs at that size: GetInclusionProof for an operation
       or a case (the log's own proofs, so verify names the leaf that does not hold), ListLeaves for
       the whole log (the proofs computed here from the leaves themselves: one tampered leaf then makes
       every proof miss the signed root);
    3. with an older signed checkpoint, GetConsistencyProof from its size, checked here: a log that
       does not extend the older checkpoint is refused (``BundleRefused``, as verify refuses it), and
       no bundle is built;
    4. GetOperation for each operation the leaves name (and the scope's own operation), the records.

The exporter believes nothing it is sent and checks nothing but that consistency (no signature: it
holds no key): ``verify_bundle`` does, offline.
``export_bundle`` makes the calls with the synchronous clients, ``export_bundle_async`` with the
asyncio ones; both build the bundle with the same steps. A refusal of a call is the client's typed
error (``decisionflow.client.errors``), raised as it came.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime

from decisionflow.audit_bundle._format import Bundle, BundleLeaf, Record, Since
from decisionflow.audit_bundle._trust import check_extends
from decisionflow.client.audit import AsyncAuditClient, AuditClient
from decisionflow.client.audit_views import AuditLeaf, ConsistencyProof, InclusionProofs, SignedCheckpoint
from decisionflow.client.errors import NotFound
from decisionflow.client.review import AsyncReviewClient, ReviewClient
from decisionflow.client.views import OperationView
from decisionflow.transparency import (
    Checkpoint,
    DecisionLeaf,
    Leaf,
    MalformedLeaf,
    TransparencyError,
    decode_leaf,
    inclusion_proof,
    leaf_hash,
    parse_checkpoint,
    parse_note,
    subtree_hashes_of_leaves,
)
from decisionflow.vocabulary import Decision

Scope = Mapping[str, str | bool]


class ExportRefused(ValueError):
    """The bundle cannot be built as asked: a checkpoint that is not one, or an older checkpoint that
    the log's latest does not reach (of the empty tree, or larger than the latest)."""


def operation_scope(operation_id: str) -> dict[str, str | bool]:
    """The scope of every leaf of one operation."""
    return {"operation_id": operation_id}


def stated_size(signed_note: str, what: str) -> tuple[str, int]:
    """Return the origin and tree size a signed checkpoint states (its signature is verify's business);
    ExportRefused, naming what, when the text is no signed checkpoint."""
    checkpoint = _stated(signed_note, what)
    return checkpoint.origin, checkpoint.size


def _stated(signed_note: str, what: str) -> Checkpoint:
    try:
        return parse_checkpoint(parse_note(signed_note).text)
    except TransparencyError as error:
        raise ExportRefused(f"{what} is not a signed checkpoint: {error}") from error


def older_size(since: str, what: str = "the since checkpoint") -> int:
    """Return the tree size of an older signed checkpoint to prove consistency from; ExportRefused when it
    is none, or of the empty tree (every tree extends it, so it proves nothing)."""
    size = stated_size(since, what)[1]
    if size == 0:
        raise ExportRefused(f"{what} is of the empty tree: every tree extends it, so it proves nothing")
    return size


def undecided_in_log(bundle: Bundle) -> list[str]:
    """The operations the orchestrator records a decision of whose decision leaf the bundle lacks (decided
    after its checkpoint, most likely): verify refuses their records until a later export covers them."""
    logged = set()
    for leaf in _decoded(bundle.leaves):
        if isinstance(leaf, DecisionLeaf):
            logged.add(leaf.operation_id)
    return [r.operation_id for r in bundle.records if r.decision and r.operation_id not in logged]


def export_bundle(
    audit: AuditClient,
    reviews: ReviewClient,
    scope: Scope,
    *,
    since: str | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Bundle:
    """Return the bundle of scope at the latest signed checkpoint (with the consistency proof from the
    older checkpoint since, when given), from the synchronous clients' answers."""
    old_size = None if since is None else older_size(since)
    checkpoint = audit.get_checkpoint()
    _reaches(checkpoint, old_size)
    if scope.get("all"):
        listed = list(audit.list_leaves(checkpoint.tree_size)) if checkpoint.tree_size else []
        leaves = _whole_log(listed)
    else:
        operation_id, case_id = _selection(scope)
        proofs = audit.inclusion_proofs(operation_id=operation_id, case_id=case_id, tree_size=checkpoint.tree_size)
        leaves = _proven(proofs)
    consistency = None if old_size is None else audit.consistency_proof(old_size, checkpoint.tree_size)
    _extends(since, checkpoint, consistency)
    records = []
    for operation_id in _named_operations(leaves, scope):
        try:
            view: OperationView | None = reviews.get_operation(operation_id)
        except NotFound:
            view = None
        records.append(_record(operation_id, view))
    return _bundle(scope, checkpoint, leaves, records, since, consistency, now())


async def export_bundle_async(
    audit: AsyncAuditClient,
    reviews: AsyncReviewClient,
    scope: Scope,
    *,
    since: str | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Bundle:
    """Return the bundle of scope at the latest signed checkpoint, as ``export_bundle`` does, from the
    asyncio clients' answers."""
    old_size = None if since is None else older_size(since)
    checkpoint = await audit.get_checkpoint()
    _reaches(checkpoint, old_size)
    if scope.get("all"):
        listed = [leaf async for leaf in audit.list_leaves(checkpoint.tree_size)] if checkpoint.tree_size else []
        leaves = _whole_log(listed)
    else:
        operation_id, case_id = _selection(scope)
        asked = audit.inclusion_proofs(operation_id=operation_id, case_id=case_id, tree_size=checkpoint.tree_size)
        leaves = _proven(await asked)
    consistency = None if old_size is None else await audit.consistency_proof(old_size, checkpoint.tree_size)
    _extends(since, checkpoint, consistency)
    records = [
        _record(operation_id, await _found(reviews.get_operation(operation_id)))
        for operation_id in _named_operations(leaves, scope)
    ]
    return _bundle(scope, checkpoint, leaves, records, since, consistency, now())


async def _found(asked: Awaitable[OperationView]) -> OperationView | None:
    try:
        return await asked
    except NotFound:
        return None


def _text(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _selection(scope: Scope) -> tuple[str | None, str | None]:
    """The operation id and the case id the scope names (exactly one of them)."""
    operation_id, case_id = scope.get("operation_id"), scope.get("case_id")
    if (operation_id is None) == (case_id is None):
        raise ValueError('scope is not one of {"all": true}, {"operation_id": …}, {"case_id": …}')
    return (None if operation_id is None else str(operation_id)), (None if case_id is None else str(case_id))


def _reaches(checkpoint: SignedCheckpoint, old_size: int | None) -> None:
    if old_size is not None and old_size > checkpoint.tree_size:
        raise ExportRefused(
            f"the since checkpoint covers {old_size} leaves, the log's latest only {checkpoint.tree_size}"
        )


def _extends(since: str | None, checkpoint: SignedCheckpoint, consistency: ConsistencyProof | None) -> None:
    """BundleRefused, with the words verify would use, when the latest checkpoint does not extend since."""
    if since is None or consistency is None:
        return
    old = _stated(since, "the since checkpoint")
    new = _stated(checkpoint.signed_note, "the log's latest checkpoint")
    check_extends(old, new, consistency.hashes, "the since checkpoint")


def _whole_log(leaves: Sequence[AuditLeaf]) -> tuple[BundleLeaf, ...]:
    # The empty tree is never asked for: size 0 would mean the latest, which may have grown since.
    hashes = [leaf_hash(leaf.data) for leaf in leaves]
    subtree = subtree_hashes_of_leaves(hashes)
    size = len(leaves)
    return tuple(
        BundleLeaf(leaf.index, _text(leaf.data), tuple(_text(h) for h in inclusion_proof(position, size, subtree)))
        for position, leaf in enumerate(leaves)
    )


def _proven(proofs: InclusionProofs) -> tuple[BundleLeaf, ...]:
    return tuple(
        BundleLeaf(proof.leaf.index, _text(proof.leaf.data), tuple(_text(h) for h in proof.hashes))
        for proof in proofs.proofs
    )


def _decoded(leaves: Iterable[BundleLeaf]) -> Iterator[Leaf]:
    for leaf in leaves:
        try:
            yield decode_leaf(base64.b64decode(leaf.data))
        except MalformedLeaf:
            continue  # verify names it; there is nothing to read from it here


def _named_operations(leaves: Iterable[BundleLeaf], scope: Scope) -> list[str]:
    named = [str(scope["operation_id"])] if "operation_id" in scope else []
    named += [leaf.operation_id for leaf in _decoded(leaves)]
    return list(dict.fromkeys(named))


def _record(operation_id: str, view: OperationView | None) -> Record:
    if view is None:
        return Record(operation_id, found=False)
    decision = "" if view.decision is Decision.UNSPECIFIED else view.decision.value
    return Record(operation_id, True, view.state.value, decision, view.reviewer, view.receipt_id or "")


def _bundle(
    scope: Scope,
    checkpoint: SignedCheckpoint,
    leaves: tuple[BundleLeaf, ...],
    records: Sequence[Record],
    since: str | None,
    consistency: ConsistencyProof | None,
    exported_at: datetime,
) -> Bundle:
    origin, _ = stated_size(checkpoint.signed_note, "the log's latest checkpoint")
    carried = None
    if since is not None and consistency is not None:
        carried = Since(since, tuple(_text(h) for h in consistency.hashes))
    return Bundle(origin, dict(scope), checkpoint.signed_note, leaves, tuple(records), carried, exported_at.isoformat())
