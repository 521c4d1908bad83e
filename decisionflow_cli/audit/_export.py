"""``decisionflow audit export``: a bundle of the latest checkpoint, the leaves of an operation, a case or the
whole log with their inclusion proofs, an optional consistency proof from an older checkpoint, and the
orchestrator's records of the operations those leaves name (GetOperation: decision, reviewer, receipt).

The calls and the bundle built from their answers are the light client's
(``decisionflow.audit_bundle.export_bundle``), which the console's audit page makes too; this command
reads the flags, writes the file whole or not at all, and says what it wrote. A log whose latest
checkpoint does not extend the ``--since`` checkpoint is refused as verify would refuse it (exit 4),
and no bundle is written.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from decisionflow.audit_bundle import (
    BundleRefused,
    ExportRefused,
    dump_bundle,
    export_bundle,
    older_size,
    stated_size,
    undecided_in_log,
)
from decisionflow.client import AuditClient, DecisionflowError, ReviewClient
from decisionflow_cli.audit._verify import EXIT_CODES
from decisionflow_cli.command import CommandError
from decisionflow_cli.review._connection import connection, read_input
from decisionflow_cli.review._output import EXIT_DONE, failed, say


def _scope(args: argparse.Namespace) -> dict[str, str | bool]:
    if args.operation_id is not None:
        return {"operation_id": args.operation_id}
    if args.case_id is not None:
        return {"case_id": args.case_id}
    return {"all": True}


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
    try:
        if older is not None:
            # Checked before any call: a file that proves nothing is bad input, not the log's refusal.
            older_size(older, f"the --since checkpoint {args.since!r}")
        with connection(args) as open_connection:
            timeout, policy = open_connection.timeout, open_connection.policy
            audit = AuditClient(open_connection.channel, timeout=timeout, policy=policy)
            reviews = ReviewClient(open_connection.channel, timeout=timeout, policy=policy)
            try:
                bundle = export_bundle(audit, reviews, scope, since=older)
            except DecisionflowError as error:
                raise failed("audit export", error, subject, print_json=False) from error
    except ExportRefused as refused:
        raise CommandError(str(refused)) from refused
    except BundleRefused as refused:
        # The log's latest checkpoint does not extend --since: said as verify says it, and nothing written.
        raise CommandError(
            f"the --since checkpoint does not hold: {refused.reason}", EXIT_CODES[refused.what]
        ) from refused
    origin, size = stated_size(bundle.checkpoint, "the log's latest checkpoint")
    _write(args.out, dump_bundle(bundle))
    for operation_id in undecided_in_log(bundle):
        say(
            f"note: the orchestrator records a decision of {operation_id} that checkpoint {size} does not cover yet; "
            "verify will refuse its record until it is exported again after a later checkpoint"
        )
    leaves = len(bundle.leaves)
    covered = f"{leaves} {'leaf' if leaves == 1 else 'leaves'}" + ("" if scope.get("all") else f" of {subject}")
    say(f"exported {covered} of checkpoint {size} of {origin} with {len(bundle.records)} record(s) to {args.out}")
    return EXIT_DONE
