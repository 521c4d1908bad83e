"""The orchestrator's database (SQLAlchemy Core). Each public method is one transaction with
its read-back inside it; helpers ending in ``_txn`` join the caller's. Rows leave as frozen
domain dataclasses.

Once-per-key rules are constraints: a proposal per operation id (primary key), a decision
per operation id (primary key), and the case's current proposal moves only by
compare-and-set. A duplicate key is told from any other constraint failure by reading the
winner in the same transaction.

Transactions (write turn, Unavailable) are ``decisionflow_server.storage.transactions``, shared with the
receiver. Parts: ``_statements`` (prebuilt statements),
``_rows`` (row → domain), ``_proposals``, ``_inbox`` (the pending reviews' listing), ``_ledger``
(decisions), ``_operations`` (reads, listing, settling), ``_checkpoints`` (the checkpoint table),
``_audit_entries`` (the audit log's entries, written with each event), ``_audit_tree`` (sequencing
and signing), ``_audit_reads`` (leaves, proofs, checkpoints), ``_migrations``, ``_housekeeping``,
``_store`` (the sync store, whose public methods come from ``_store_proposals``, ``_store_ledger``,
``_store_operations`` and ``_store_audit`` on ``_store_base``) and ``_async`` (its async facade).
"""

from __future__ import annotations

from decisionflow_server.storage.transactions import Transactions
from orchestrator.store._async import AsyncOrchestratorStore
from orchestrator.store._checkpoints import CheckpointTable
from orchestrator.store._housekeeping import SETTLED_STATES, Housekeeping
from orchestrator.store._ledger import AttemptInFlight, DecisionAlreadyRecorded
from orchestrator.store._migrations import MIGRATIONS, VERSION_TABLE, migrate
from orchestrator.store._store import OrchestratorStore

__all__ = [
    "MIGRATIONS",
    "SETTLED_STATES",
    "VERSION_TABLE",
    "AsyncOrchestratorStore",
    "AttemptInFlight",
    "CheckpointTable",
    "DecisionAlreadyRecorded",
    "Housekeeping",
    "OrchestratorStore",
    "Transactions",
    "migrate",
]
