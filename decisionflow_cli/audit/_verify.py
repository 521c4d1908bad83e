"""``decisionflow audit verify``: check a bundle offline with the log's verifier keys, and say what it proved."""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Sequence

from decisionflow.audit_bundle import BundleProof, BundleRefused, MalformedBundle, load_bundle, verify_bundle
from decisionflow.transparency import NoteVerifier, TransparencyError
from decisionflow_cli.command import CommandError
from decisionflow_cli.review._connection import read_input
from decisionflow_cli.review._output import emit

EXIT_VERIFIED = 0
EXIT_LEAF_FAILS = 1
EXIT_CHECKPOINT_FAILS = 4

# A refusal of the checkpoint (its signature, its origin, its consistency with an older one) is told
# apart from one of a leaf or a record: the first may be the wrong key file, the second never is.
EXIT_CODES = {"checkpoint": EXIT_CHECKPOINT_FAILS, "since": EXIT_CHECKPOINT_FAILS}


def read_keys(paths: Sequence[str]) -> list[NoteVerifier]:
    """The verifier keys of every --public-key file: one key per line (blank lines skipped)."""
    keys = []
    for path in paths:
        lines = [line.strip() for line in read_input(path, "the public key").splitlines()]
        if not any(lines):
            raise CommandError(f"the public key file {path!r} holds no verifier key")
        for number, line in enumerate(lines, start=1):
            if not line:
                continue
            try:
                keys.append(NoteVerifier.from_vkey(line))
            except TransparencyError as error:
                raise CommandError(
                    f"the public key {path!r}, line {number}, is not a verifier key (name+keyid+base64 key): {error}"
                ) from error
    return keys


def scope_words(scope: dict[str, str | bool]) -> str:
    """The bundle's scope, as a person reads it."""
    if "operation_id" in scope:
        return f"operation {scope['operation_id']}"
    if "case_id" in scope:
        return f"case {scope['case_id']}"
    return "the whole log"


def _short(vkey: str) -> str:
    return "+".join(vkey.split("+")[:2])  # name+keyid


def _summary(proof: BundleProof) -> list[str]:
    kinds = ", ".join(f"{count} {kind}{'s' if count != 1 else ''}" for kind, count in sorted(proof.kinds.items()))
    root = base64.b64encode(proof.root_hash).decode("ascii")
    included = "the whole log: together they hash to the signed root" if proof.whole_log else "each proven included"
    pinned = "pinned by --origin" if proof.origin_pinned else "taken from the bundle, not pinned (pin it with --origin)"
    lines = [
        f"verified checkpoint {proof.tree_size} of {proof.origin}, root {root}, signed by key {_short(proof.key)}",
        f"trusted origin {proof.origin}: {pinned}",
        f"scope: {scope_words(proof.scope)}",
        f"{proof.leaves} leaves, {included}",
        f"{kinds or 'no leaves'}; {proof.operations} operation(s), each proposal yields its id, decisions follow them",
    ]
    if proof.since_size is not None:
        by = "the leaves" if proof.since_proven_by == "leaves" else "the consistency proof"
        signer = _short(proof.since_key or "")
        lines.append(
            f"consistent with checkpoint {proof.since_size} (signed by key {signer}), proven by {by}: "
            "the log only grew since"
        )
    lines.append(
        f"{proof.records} orchestrator record(s) agree with the log, one for each operation of the scope "
        "(decision, reviewer and logged receipt, as exported)"
    )
    return lines


def _document(proof: BundleProof) -> dict[str, object]:
    return {
        "verified": True,
        "scope": proof.scope,
        "origin": proof.origin,
        "origin_pinned": proof.origin_pinned,
        "tree_size": proof.tree_size,
        "root_hash": base64.b64encode(proof.root_hash).decode("ascii"),
        "key": proof.key,
        "whole_log": proof.whole_log,
        "leaves": proof.leaves,
        "kinds": proof.kinds,
        "operations": proof.operations,
        "since_size": proof.since_size,
        "since_key": proof.since_key,
        "since_proven_by": proof.since_proven_by,
        "records": proof.records,
    }


def run_verify(args: argparse.Namespace) -> int:
    """Exit 0 when the bundle holds; 1 when a leaf or record does not; 4 when a checkpoint does not."""
    keys = read_keys(args.public_key)
    older = read_input(args.since, "the --since checkpoint") if args.since else None
    try:
        bundle = load_bundle(read_input(args.bundle, "the bundle"))
    except MalformedBundle as error:
        raise CommandError(f"{args.bundle!r} is not an audit bundle: {error}") from error
    try:
        proof = verify_bundle(bundle, keys, since=older, origin=args.origin)
    except BundleRefused as refused:
        exit_code = EXIT_CODES.get(refused.what, EXIT_LEAF_FAILS)
        if args.json:
            emit(
                {
                    "verified": False,
                    "scope": dict(bundle.scope),
                    "origin": args.origin or bundle.origin,
                    "origin_pinned": args.origin is not None,
                    "what": refused.what,
                    "where": refused.where,
                    "index": refused.index,
                    "reason": refused.reason,
                    "exit_code": exit_code,
                }
            )
        raise CommandError(f"{refused.where} does not hold: {refused.reason}", exit_code) from refused
    if args.json:
        emit(_document(proof))
    else:
        sys.stdout.write("".join(line + "\n" for line in _summary(proof)))
    return EXIT_VERIFIED
