"""Tables of the orchestrator's database (changed only through Alembic migrations).

Proposals, decisions and receipts are kept forever; checkpoints of settled operations
may be pruned (``decisionflow-orchestrator prune-checkpoints``).
"""

from __future__ import annotations

import sqlalchemy as sa

from decisionflow_server.storage.db import UtcDateTime

metadata = sa.MetaData()

# Stored in UTC, always read back aware (SQL type: timestamp with time zone, as migrated).
_ts = UtcDateTime()

cases = sa.Table(
    "cases",
    metadata,
    sa.Column("case_id", sa.String(64), primary_key=True),
    # Compare-and-set target of EditProposal: the one proposal a decision may bind to.
    sa.Column("current_operation_id", sa.String(70), nullable=False),
    sa.Column("updated_at", _ts, nullable=False),
)

proposals = sa.Table(
    "proposals",
    metadata,
    sa.Column("operation_id", sa.String(70), primary_key=True),
    sa.Column("case_id", sa.String(64), nullable=False, index=True),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("evidence_json", sa.Text, nullable=False),
    sa.Column("evidence_id", sa.String(70), nullable=False),
    sa.Column("policy_json", sa.Text, nullable=False),
    sa.Column("policy_id", sa.String(71), nullable=False),
    sa.Column("human_edited", sa.Boolean, nullable=False),
    # What this proposal replaced or was edited from.
    sa.Column("parent_operation_id", sa.String(70), nullable=True),
    # Indexed: an author's open reviews are counted on every proposal they add (orchestrator.quotas).
    sa.Column("created_by", sa.String(128), nullable=False, index=True),
    sa.Column("created_at", _ts, nullable=False),
    # JSON list: created_by and the parent's authors, written once with the row, so four-eyes reads
    # one column instead of walking the chain. NULL only on a row a replica of an earlier release
    # wrote during an upgrade: its authors are then read from the chain of parents.
    sa.Column("authors_json", sa.Text, nullable=True),
)

pending_reviews = sa.Table(
    "pending_reviews",
    metadata,
    sa.Column("operation_id", sa.String(70), sa.ForeignKey("proposals.operation_id"), primary_key=True),
    sa.Column("workflow_name", sa.String(128), nullable=False),
    sa.Column("workflow_version", sa.String(32), nullable=False),
    sa.Column("graph_signature", sa.String(128), nullable=False),
    sa.Column("checkpoint_id", sa.String(64), nullable=False),
    sa.Column("created_at", _ts, nullable=False),
    # Set when the review was re-opened under a new workflow version; never resumed again.
    sa.Column("retired_checkpoint_id", sa.String(64), nullable=True),
)

# The decision ledger: one row per operation, inserted once; the primary key decides
# races between replicas.
decisions = sa.Table(
    "decisions",
    metadata,
    sa.Column("operation_id", sa.String(70), sa.ForeignKey("proposals.operation_id"), primary_key=True),
    sa.Column("decision", sa.String(16), nullable=False),
    sa.Column("reviewer", sa.String(128), nullable=False),
    sa.Column("decided_at", _ts, nullable=False),
)

operations = sa.Table(
    "operations",
    metadata,
    sa.Column("operation_id", sa.String(70), sa.ForeignKey("proposals.operation_id"), primary_key=True),
    sa.Column("case_id", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("state_changed_at", _ts, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("first_attempt_at", _ts, nullable=True),
    sa.Column("last_attempt_at", _ts, nullable=True),
    # While an attempt's Apply may be in flight: until then no other caller, on any replica, drives
    # the operation; a holder that crashed lets the next caller drive once it has passed.
    sa.Column("attempt_lease_until", _ts, nullable=True),
    # Who took that lease: the orchestrator process (host:pid:instance), for operators.
    sa.Column("attempt_lease_holder", sa.String(200), nullable=True),
    # Built once from the stored proposal and decision, so every retry and re-drive
    # sends identical bytes under the same digest.
    sa.Column("payload", sa.LargeBinary, nullable=True),
    sa.Column("payload_digest", sa.String(64), nullable=True),
    sa.Column("receipt_id", sa.String(64), nullable=True),
    sa.Column("receipt_applied_at", _ts, nullable=True),
    sa.Column("rejection_reason", sa.Text, nullable=True),
    sa.Column("last_lookup_at", _ts, nullable=True),
    sa.Column("last_lookup_status", sa.String(16), nullable=True),
    sa.Column("last_lookup_consistency", sa.String(16), nullable=True),
    sa.Column("last_lookup_error", sa.Text, nullable=True),
    sa.Index("ix_operations_state_changed", "state", "state_changed_at"),
)

checkpoints = sa.Table(
    "checkpoints",
    metadata,
    sa.Column("checkpoint_id", sa.String(64), primary_key=True),
    sa.Column("workflow_name", sa.String(128), nullable=False),
    sa.Column("graph_signature", sa.String(128), nullable=False),
    sa.Column("operation_id", sa.String(70), nullable=False, index=True),
    sa.Column("created_at", _ts, nullable=False),
    # HMAC-SHA256 over (checkpoint_id, workflow_name, graph_signature, operation_id, state)
    # under key_id; verified before the state is unpickled.
    sa.Column("key_id", sa.String(16), nullable=False),
    sa.Column("mac", sa.String(64), nullable=False),
    sa.Column("state", sa.LargeBinary, nullable=False),
)
