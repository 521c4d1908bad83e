"""``decisionflow audit export``: a bundle of the latest checkpoint, the leaves of an operation, a case or the
whole log with their inclusion proofs, an optional consistency proof from an older checkpoint, and the
orchestrator's records of the operations those leaves name (GetOperation: decision, reviewer, receipt).

The exporter believes nothing it is sent and checks nothing: ``decisionflow audit verify`` does, offline.
For the whole log the proofs are computed here from the leaves themselves rather than asked for one
leaf at a time: one tampered leaf then makes every proof miss the signed root, and verify names the
first leaf; a bundle of one operation or case carries the log's own proofs and names the leaf itself.
"""

from __future__ import annotations

import argparse
import base64
import os
import tempfile
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from decisionflow.audit_bundle import Bundle, BundleLeaf, Record, Since, dump_bundle
from decisionflow.client import (
    AuditClient,
    Decision,
    DecisionflowError,
    NotFound,
    ReviewClient,
    SignedCheckpoint,
)
from decisionflow.transparency import (
    DecisionLeaf,
    MalformedLeaf,
    TransparencyError,
    decode_leaf,
    inclusion_proof,
    leaf_hash,
    parse_checkpoint,
    parse_note,
    subtree_hashes_of_leaves,
)
from decisionflow_server.apps.cli.command import CommandError
from decisionflow_server.apps.cli.review._connection import connection, read_input
from decisionflow_server.apps.cli.review._output import EXIT_DONE, failed, say


def _text(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _size_of(signed_note: str, what: str) -> tuple[str, int]:
    """The origin and size a signed checkpoint states (its signature is verify's business)."""
    try:
        checkpoint = parse_checkpoint(parse_note(signed_note).text)
    except TransparencyError as error:
        raise CommandError(f"{what} is not a signed checkpoint: {error}") from error
    return checkpoint.origin, checkpoint.size


def _scope(args: argparse.Namespace) -> dict[str, str | bool]:
    if args.operation_id is not None:
        return {"operation_id": args.operation_id}
    if args.case_id is not None:
        return {"case_id": args.case_id}
    return {"all": True}


def _whole_log(audit: AuditClient, checkpoint: SignedCheckpoint) -> list[BundleLeaf]:
    if checkpoint.tree_size == 0:
        return []  # the empty tree; asking for size 0 would mean the latest, which may have grown since
    leaves = list(audit.list_leaves(checkpoint.tree_size))
    hashes = [leaf_hash(leaf.data) for leaf in leaves]
    subtree = subtree_hashes_of_leaves(hashes)
    size = len(leaves)
    return [
        BundleLeaf(leaf.index, _text(leaf.data), tuple(_text(h) for h in inclusion_proof(position, size, subtree)))
        for position, leaf in enumerate(leaves)
    ]


def _proven(audit: AuditClient, scope: dict[str, str | bool], checkpoint: SignedCheckpoint) -> list[BundleLeaf]:
    if scope.get("all"):
        return _whole_log(audit, checkpoint)
    operation_id, case_id = scope.get("operation_id"), scope.get("case_id")
    proofs = audit.inclusion_proofs(
        operation_id=None if operation_id is None else str(operation_id),
        case_id=None if case_id is None else str(case_id),
        tree_size=checkpoint.tree_size,
    )
    return [
        BundleLeaf(proof.leaf.index, _text(proof.leaf.data), tuple(_text(h) for h in proof.hashes))
        for proof in proofs.proofs
    ]


def _named_operations(leaves: Iterable[BundleLeaf], scope: dict[str, str | bool]) -> list[str]:
    named = [str(scope["operation_id"])] if "operation_id" in scope else []
    for leaf in leaves:
        try:
            named.append(decode_leaf(base64.b64decode(leaf.data)).operation_id)
        except MalformedLeaf:
            continue  # verify names it; there is no operation to ask about
    return list(dict.fromkeys(named))


def _records(reviews: ReviewClient, operation_ids: Sequence[str]) -> list[Record]:
    records = []
    for operation_id in operation_ids:
        try:
            view = reviews.get_operation(operation_id)
        except NotFound:
            records.append(Record(operation_id, found=False))
            continue
        decision = "" if view.decision is Decision.UNSPECIFIED else view.decision.value
        records.append(Record(operation_id, True, view.state.value, decision, view.reviewer, view.receipt_id or ""))
    return records


def _undecided_in_log(leaves: Sequence[BundleLeaf], records: Sequence[Record]) -> list[str]:
    """The decided operations whose decision leaf the bundle lacks (decided after its checkpoint, most likely)."""
    logged = set()
    for leaf in leaves:
        try:
            decoded = decode_leaf(base64.b64decode(leaf.data))
        except MalformedLeaf:
            continue
        if isinstance(decoded, DecisionLeaf):
            logged.add(decoded.operation_id)
    return [r.operation_id for r in records if r.decision and r.operation_id not in logged]


def _write(path: str, text: str) -> None:
    """Write text to path whole or not at all: a reader never sees half a bundle."""
    target = Path(path)
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=".bundle-", dir=target.parent or Path("."))
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, target)
    except OSError as exc:
        raise CommandError(f"cannot write the bundle {path!r}: {exc.strerror or exc}") from exc


def run_export(args: argparse.Namespace) -> int:
    """Write the bundle to --out; exit 0 once written."""
    scope = _scope(args)
    subject = "the audit log" if "all" in scope else str(next(iter(scope.values())))
    older = read_input(args.since, "the --since checkpoint") if args.since else None
    old_size = None if older is None else _size_of(older, f"the --since checkpoint {args.since!r}")[1]
    if old_size == 0:
        raise CommandError("the --since checkpoint is of the empty tree: every tree extends it, so it proves nothing")
    with connection(args) as open_connection:
        timeout, policy = open_connection.timeout, open_connection.policy
        audit = AuditClient(open_connection.channel, timeout=timeout, policy=policy)
        reviews = ReviewClient(open_connection.channel, timeout=timeout, policy=policy)
        try:
            checkpoint = audit.get_checkpoint()
            if old_size is not None and old_size > checkpoint.tree_size:
                raise CommandError(
                    f"the --since checkpoint covers {old_size} leaves, the log's latest only {checkpoint.tree_size}"
                )
            leaves = _proven(audit, scope, checkpoint)
            since = None
            if older is not None and old_size is not None:
                consistency = audit.consistency_proof(old_size, checkpoint.tree_size)
                since = Since(older, tuple(_text(h) for h in consistency.hashes))
            records = _records(reviews, _named_operations(leaves, scope))
        except DecisionflowError as error:
            raise failed("audit export", error, subject, print_json=False) from error
    origin, size = _size_of(checkpoint.signed_note, "the log's latest checkpoint")
    exported_at = datetime.now(UTC).isoformat()
    _write(
        args.out,
        dump_bundle(Bundle(origin, scope, checkpoint.signed_note, tuple(leaves), tuple(records), since, exported_at)),
    )
    for operation_id in _undecided_in_log(leaves, records):
        say(
            f"note: the orchestrator records a decision of {operation_id} that checkpoint {size} does not cover yet; "
            "verify will refuse its record until it is exported again after a later checkpoint"
        )
    covered = f"{len(leaves)} {'leaf' if len(leaves) == 1 else 'leaves'}" + (
        "" if scope.get("all") else f" of {subject}"
    )
    say(f"exported {covered} of checkpoint {size} of {origin} with {len(records)} record(s) to {args.out}")
    return EXIT_DONE
