"""Where the orchestrator finds the audit log's reader: the one wiring point between the store and the
AuditService (orchestrator.main registers the service only when there is a reader)."""

from __future__ import annotations

from typing import cast

from orchestrator.audit.ports import AuditLogReader
from orchestrator.store import OrchestratorStore

# What the AuditService reads of the log (orchestrator.audit.ports.AuditLogReader).
AUDIT_LOG_READS = ("latest_checkpoint", "checkpoint", "leaves", "leaf_indices", "inclusion_proof", "consistency_proof")


def exposes_audit_log(candidate: object) -> bool:
    """True when candidate (an object or its class) has every read of AuditLogReader."""
    return all(callable(getattr(candidate, name, None)) for name in AUDIT_LOG_READS)


def audit_log_of(store: OrchestratorStore) -> AuditLogReader | None:
    """The store's reader of the audit log, or None when it reads none (then no AuditService is served).

    WIRING POINT. The store is to read the log it writes (leaves in the same transaction as each
    event, a sequencer, signed checkpoints); this takes it from the store as soon as the store
    offers AuditLogReader's reads. If the store hands the reader out as an object of its own (an
    attribute or a method such as ``store.audit_log()``), return that here instead.
    """
    return cast(AuditLogReader, store) if exposes_audit_log(store) else None
