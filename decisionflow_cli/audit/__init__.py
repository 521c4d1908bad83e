"""``decisionflow audit export|verify|monitor``: take the audit log's proofs away, check them without any
service, and watch that the log's published checkpoints only ever extend each other.

``export`` asks the orchestrator's AuditService (role auditor or operator) for the latest checkpoint and
the leaves of an operation, a case or the whole log with their inclusion proofs (and, with
``--since``, the consistency proof from an older checkpoint, checked to extend it), asks GetOperation for
the orchestrator's record of each operation those leaves name, and writes one JSON bundle. ``verify``
reads the bundle and the log's verifier keys (several across a key rotation), needs no service, and
prints what the bundle proved (its scope, the origin trusted, the keys that signed), or the first
checkpoint, leaf or record that does not hold. See docs/audit-log.md.

Exit status:
  export   0 written; 3 refused (not found, beyond the latest checkpoint, permission denied,
           unauthenticated); 4 the latest checkpoint does not extend --since (nothing written);
           1 error (unavailable after retries, deadline, internal); 2 bad usage or input
  verify   0 everything holds; 1 a leaf or a record does not hold (tampered, missing, out of order,
           not decoding, against the log's rules, a record edited since, missing or doubled); 4 a
           checkpoint does not hold (not signed by a trusted key, another origin, inconsistent with
           --since); 2 bad usage or input (a file that cannot be read, not a bundle, not a verifier key)
  monitor  0 the published checkpoint extends the last one seen (or is the first); 4 a fork, a rollback or
           a checkpoint the key did not sign; 1 error (cannot fetch, orchestrator unavailable); 3 refused;
           2 bad usage or input
"""

from __future__ import annotations

from decisionflow_cli.audit._export import run_export
from decisionflow_cli.audit._monitor import run_monitor
from decisionflow_cli.audit._verify import run_verify
from decisionflow_cli.command import Subparsers
from decisionflow_cli.review._connection import CONNECTION_SETTINGS
from decisionflow_server.foundation.settings import add_settings, positive_seconds

__all__ = ["register"]

EXPORT_EXIT_CODES = (
    "exit status: 0 written; 3 refused (not found, beyond the latest checkpoint, permission denied, "
    "unauthenticated); 4 the latest checkpoint does not extend --since (nothing written); 1 error "
    "(unavailable after retries, deadline, internal); 2 bad usage or input. See docs/audit-log.md"
)
MONITOR_EXIT_CODES = (
    "exit status: 0 the checkpoint extends the last one seen (or is the first); 4 a fork, a rollback, or a "
    "checkpoint not signed by the key; 1 error (cannot fetch, orchestrator unavailable); 3 refused (permission "
    "denied, unauthenticated); 2 bad usage or input. See docs/audit-log.md"
)
VERIFY_EXIT_CODES = (
    "exit status: 0 everything holds; 1 a leaf or a record does not hold (tampered, missing, out of order, "
    "against the log's rules, a record edited since, missing or doubled); 4 a checkpoint does not hold (not "
    "signed by a trusted key, another origin, inconsistent with --since); 2 bad usage or input. See docs/audit-log.md"
)


def register(subparsers: Subparsers) -> None:
    """Add ``audit`` with its subcommands ``export``, ``verify`` and ``monitor``."""
    audit = subparsers.add_parser(
        "audit",
        help="export the audit log's proofs to a bundle, and verify a bundle offline (auditor)",
        description="Export signed proofs from the orchestrator's audit log (role auditor or operator), and "
        "verify them with nothing but the log's verifier key. See docs/audit-log.md.",
    )
    commands = audit.add_subparsers(dest="audit_command", metavar="AUDIT_COMMAND", required=True)

    export = commands.add_parser(
        "export",
        help="write a bundle: the latest checkpoint, leaves with inclusion proofs, the orchestrator's records",
        description="Write a bundle of the latest signed checkpoint, the leaves of an operation, a case or the "
        "whole log with their inclusion proofs, and the orchestrator's records of the operations they name.",
        epilog=EXPORT_EXIT_CODES,
    )
    add_settings(export, CONNECTION_SETTINGS)
    chosen = export.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--operation", dest="operation_id", metavar="OPERATION_ID", help="every leaf of one operation")
    chosen.add_argument("--case", dest="case_id", metavar="CASE_ID", help="every leaf of every operation of a case")
    chosen.add_argument("--all", action="store_true", help="every leaf of the log (verify recomputes the root)")
    export.add_argument("--out", required=True, metavar="BUNDLE", help="the bundle file to write (JSON)")
    export.add_argument(
        "--since",
        metavar="CHECKPOINT_FILE",
        help="an older signed checkpoint (as a bundle or GetCheckpoint gave it): add the consistency proof from it "
        "(refused, exit 4, when the log does not extend it)",
    )
    export.set_defaults(func=run_export)

    verify = commands.add_parser(
        "verify",
        help="check a bundle offline with the log's verifier key",
        description="Check a bundle without any service: the checkpoint's signature, each leaf's inclusion "
        "proof (for a whole-log bundle, the root of all leaves), the consistency from an older checkpoint, "
        "that each leaf decodes and fits the log's rules, and that the orchestrator's records match the bundle's scope "
        "one to one and agree with the leaves (decision, reviewer, a receipt the log holds). Say which keys and "
        "origin to trust; it says which it trusted.",
        epilog=VERIFY_EXIT_CODES,
    )
    verify.add_argument("bundle", metavar="BUNDLE", help="the bundle file (- for standard input)")
    verify.add_argument(
        "--public-key",
        required=True,
        action="append",
        metavar="FILE",
        help="file holding the log's verifier keys, one per line (name+keyid+key); repeat it to trust several "
        "(the old and the new key across a rotation)",
    )
    verify.add_argument(
        "--origin",
        metavar="ORIGIN",
        help="the log's origin to trust (the first line of its checkpoints); without it, the bundle's is taken",
    )
    verify.add_argument(
        "--since", metavar="CHECKPOINT_FILE", help="an older signed checkpoint you kept: prove the log only grew since"
    )
    verify.add_argument("--json", action="store_true", help="print one JSON object instead of text for people")
    verify.set_defaults(func=run_verify)

    monitor = commands.add_parser(
        "monitor",
        help="check that the log's published checkpoint extends the last one seen (a witness's check)",
        description="Fetch the audit log's published checkpoint (its URL, such as http://HOST:METRICS_PORT/checkpoint, "
        "or its file), check its signature, and check by a consistency proof that it extends the last checkpoint "
        "kept in --state; keep it when it does. A fork or a rollback exits 4 and keeps the checkpoint fetched "
        "in STATE.fork.",
        epilog=MONITOR_EXIT_CODES,
    )
    add_settings(monitor, CONNECTION_SETTINGS)
    monitor.add_argument(
        "--checkpoint", required=True, metavar="URL_OR_FILE", help="the published checkpoint: an http(s) URL or a file"
    )
    monitor.add_argument(
        "--state", required=True, metavar="FILE", help="the last checkpoint seen (created on the first run)"
    )
    monitor.add_argument(
        "--public-key",
        required=True,
        action="append",
        metavar="FILE",
        help="file holding the log's verifier key, one per line (repeat it, or give several lines, across a rotation)",
    )
    monitor.add_argument("--origin", help="the log's name to trust (default: the one kept in --state)")
    monitor.add_argument(
        "--every",
        type=positive_seconds,
        metavar="SECONDS",
        help="keep checking every SECONDS until a fork (a checkpoint that cannot be fetched is tried again)",
    )
    monitor.set_defaults(func=run_monitor)
