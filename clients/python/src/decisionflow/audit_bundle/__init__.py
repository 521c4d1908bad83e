"""Audit bundles: what ``decisionflow audit export`` (and the console's audit page) writes and
``decisionflow audit verify`` checks, offline.

A bundle is one JSON file (``_format``): the log's origin, a signed checkpoint, leaves (index, base64
bytes, inclusion proof at the checkpoint's size), optionally an older checkpoint with the
consistency proof to this one, and the orchestrator's records of the operations those leaves
name. ``export_bundle`` (``export_bundle_async`` with the asyncio clients) builds one from the
AuditService's and GetOperation's answers (``_export``). ``verify_bundle`` needs nothing but the
bundle and the log's verifier keys (``_trust``: several across a key rotation, and the origin when
pinned); it returns what the bundle proved, or raises ``BundleRefused`` naming the first checkpoint,
leaf or record that does not hold (``_verify``; the records' check and what it proves: ``_records``;
docs/audit-log.md, "Exporting and verifying a bundle")::

    from decisionflow.audit_bundle import load_bundle, verify_bundle
    from decisionflow.transparency import NoteVerifier

    proof = verify_bundle(load_bundle(text), [NoteVerifier.from_vkey(log_vkey)], origin=log_origin)
"""

from decisionflow.audit_bundle._export import (
    ExportRefused,
    export_bundle,
    export_bundle_async,
    older_size,
    operation_scope,
    stated_size,
    undecided_in_log,
)
from decisionflow.audit_bundle._format import (
    FORMAT,
    Bundle,
    BundleLeaf,
    MalformedBundle,
    Record,
    Since,
    dump_bundle,
    load_bundle,
)
from decisionflow.audit_bundle._verify import BundleProof, BundleRefused, verify_bundle

__all__ = [
    "FORMAT",
    "Bundle",
    "BundleLeaf",
    "BundleProof",
    "BundleRefused",
    "ExportRefused",
    "MalformedBundle",
    "Record",
    "Since",
    "dump_bundle",
    "export_bundle",
    "export_bundle_async",
    "load_bundle",
    "older_size",
    "operation_scope",
    "stated_size",
    "undecided_in_log",
    "verify_bundle",
]
