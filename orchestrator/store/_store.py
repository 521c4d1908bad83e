"""OrchestratorStore: each public method is one transaction, its read-back inside it.

Its methods come in parts, one concept each: ``_store_proposals`` (proposals and pending reviews),
``_store_ledger`` (the decision ledger and the effect record), ``_store_operations`` (reading and
settling operations) and ``_store_audit`` (sequencing and reading the audit log, whose entries the
others write with their events), on ``_store_base`` (the transactions and tables they share).
"""

from __future__ import annotations

from orchestrator.store._store_audit import AuditMethods
from orchestrator.store._store_ledger import LedgerMethods
from orchestrator.store._store_operations import OperationMethods
from orchestrator.store._store_proposals import ProposalMethods


class OrchestratorStore(ProposalMethods, LedgerMethods, OperationMethods, AuditMethods):
    """Proposals, pending reviews, the decision ledger, operation states, checkpoints and the audit log
    (an ``orchestrator.audit_log.ports.AuditLogReader``)."""
