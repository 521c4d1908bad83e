"""``decisionflow audit verify``: check a bundle offline with the log's verifier key, and say what it proved."""

from __future__ import annotations

import argparse
import base64
import sys

from decisionflow.audit_bundle import BundleProof, BundleRefused, MalformedBundle, load_bundle, verify_bundle
from decisionflow.transparency import NoteVerifier, TransparencyError
from decisionflow_server.apps.cli.command import CommandError
from decisionflow_server.apps.cli.review._connection import read_input
from decisionflow_server.apps.cli.review._output import emit

EXIT_VERIFIED = 0
EXIT_LEAF_FAILS = 1
EXIT_CHECKPOINT_FAILS = 4

# A refusal of the checkpoint (its signature, its origin, its consistency with an older one) is told
# apart from one of a leaf or a record: the first may be the wrong key file, the second never is.
_EXIT_CODES = {"checkpoint": EXIT_CHECKPOINT_FAILS, "since": EXIT_CHECKPOINT_FAILS}


def _key(path: str) -> NoteVerifier:
    text = read_input(path, "the public key").strip()
    try:
        return NoteVerifier.from_vkey(text)
    except TransparencyError as error:
        raise CommandError(f"the public key {path!r} is not a verifier key (name+keyid+base64 key): {error}") from error


def _summary(proof: BundleProof) -> list[str]:
    kinds = ", ".join(f"{count} {kind}{'s' if count != 1 else ''}" for kind, count in sorted(proof.kinds.items()))
    root = base64.b64encode(proof.root_hash).decode("ascii")
    scope = "the whole log: together they hash to the signed root" if proof.whole_log else "each proven included"
    key = "+".join(proof.key.split("+")[:2])  # name+keyid
    lines = [
        f"verified checkpoint {proof.tree_size} of {proof.origin}, root {root}, signed by key {key}",
        f"{proof.leaves} leaves, {scope}",
        f"{kinds or 'no leaves'}; {proof.operations} operation(s), each proposal yields its id, decisions follow them",
    ]
    if proof.since_size is not None:
        lines.append(f"consistent with checkpoint {proof.since_size}: the log only grew since")
    lines.append(f"{proof.records} orchestrator record(s) agree with the log")
    return lines


def run_verify(args: argparse.Namespace) -> int:
    """Exit 0 when the bundle holds; 1 when a leaf or record does not; 4 when a checkpoint does not."""
    key = _key(args.public_key)
    older = read_input(args.since, "the --since checkpoint") if args.since else None
    try:
        bundle = load_bundle(read_input(args.bundle, "the bundle"))
    except MalformedBundle as error:
        raise CommandError(f"{args.bundle!r} is not an audit bundle: {error}") from error
    try:
        proof = verify_bundle(bundle, key, since=older)
    except BundleRefused as refused:
        exit_code = _EXIT_CODES.get(refused.what, EXIT_LEAF_FAILS)
        if args.json:
            emit(
                {
                    "verified": False,
                    "what": refused.what,
                    "where": refused.where,
                    "index": refused.index,
                    "reason": refused.reason,
                    "exit_code": exit_code,
                }
            )
        raise CommandError(f"{refused.where} does not hold: {refused.reason}", exit_code) from refused
    if args.json:
        emit(
            {
                "verified": True,
                "origin": proof.origin,
                "tree_size": proof.tree_size,
                "root_hash": base64.b64encode(proof.root_hash).decode("ascii"),
                "key": proof.key,
                "whole_log": proof.whole_log,
                "leaves": proof.leaves,
                "kinds": proof.kinds,
                "operations": proof.operations,
                "since_size": proof.since_size,
                "records": proof.records,
            }
        )
    else:
        sys.stdout.write("".join(line + "\n" for line in _summary(proof)))
    return EXIT_VERIFIED
