"""``decisionflow identity``: framed bytes and the identities of a proposal (docs/identities.md).

Proposal files are read strictly by decisionflow_server.foundation.proposal_json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from decisionflow.identity import (
    IdentityError,
    frame,
    identities,
)
from decisionflow_cli.command import CommandError, Subparsers
from decisionflow_server.foundation.proposal_json import proposal_from_json


def register(subparsers: Subparsers) -> None:
    """Add ``identity frame`` and ``identity operation``."""
    parser = subparsers.add_parser(
        "identity",
        help="compute framed bytes and identities",
        description="Compute the canonical framed bytes and identities described in docs/identities.md.",
    )
    commands = parser.add_subparsers(dest="identity_command", metavar="SUBCOMMAND", required=True)

    frame_parser = commands.add_parser(
        "frame",
        help="print the framed bytes of FIELDs as lowercase hex",
        description="Print the framed bytes of the fields as lowercase hex (use -- before a field like -x).",
    )
    frame_parser.add_argument("fields", nargs="+", metavar="FIELD")
    frame_parser.set_defaults(func=_run_frame)

    operation_parser = commands.add_parser(
        "operation",
        help="print the operation, evidence and policy ids of a proposal as JSON",
        description=(
            "Read {case_id, action, body, evidence: [{source_id, version, quotation}], "
            "policy: {name, version_label, allowance_units, rules}} and print the three ids as JSON."
        ),
    )
    operation_parser.add_argument("file", metavar="FILE", help="proposal JSON file, - for standard input")
    operation_parser.add_argument(
        "--id-only", action="store_true", help="print the operation id alone, as a line (for scripts)"
    )
    operation_parser.set_defaults(func=_run_operation)


def _run_frame(args: argparse.Namespace) -> int:
    try:
        framed = frame(args.fields)
    except IdentityError as exc:
        raise CommandError(str(exc)) from exc
    sys.stdout.write(framed.hex() + "\n")
    return 0


def _run_operation(args: argparse.Namespace) -> int:
    text = _read_text(args.file)
    try:
        ids = identities(*proposal_from_json(text))
    except IdentityError as exc:
        raise CommandError(str(exc)) from exc
    if args.id_only:
        sys.stdout.write(ids.operation_id + "\n")
        return 0
    result = {"operation_id": ids.operation_id, "evidence_id": ids.evidence_id, "policy_id": ids.policy_id}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


def _read_text(path: str) -> str:
    name = "standard input" if path == "-" else repr(path)
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {name}: {exc.strerror or exc}") from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(f"{name} is not UTF-8 (byte {exc.start})") from exc
