"""Tables of the orchestrator's database (changed only through Alembic migrations).

Proposals, decisions and receipts are kept forever; checkpoints of settled operations
may be pruned (``decisionflow-orchestrator prune-checkpoints``). The audit log's three tables
(``audit_entries``, ``audit_nodes``, ``audit_checkpoints``) are append-only: a row is never deleted,
and an entry changes once, when the sequencer gives it its index (docs/audit-log.md).
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
    # The review rule in force for the action when the proposal was recorded (review_rules.digest).
    # NULL: the action's default rule, which is also what every row written before rules existed means.
    sa.Column("rule_digest", sa.String(72), nullable=True),
)

# Each review rule a proposal follows, once by its digest (content-addressed: a row never changes, and
# the same rule captured by many proposals is one row).
review_rules = sa.Table(
    "review_rules",
    metadata,
    # "rule-v1-" and the lowercase hex SHA-256 of encoded (decisionflow.review_rules.rule_digest).
    sa.Column("digest", sa.String(72), primary_key=True),
    # The rule's canonical bytes (decisionflow.review_rules.encode_rule).
    sa.Column("encoded", sa.LargeBinary, nullable=False),
)

# The votes of reviews under a rule other than the default one, in the order they were recorded: one per
# principal and operation (the unique key decides a principal's race with themself), with the groups
# the principal held when voting, as eligibility was decided by them.
votes = sa.Table(
    "votes",
    metadata,
    # Integer on SQLite: only an INTEGER PRIMARY KEY is its rowid, numbered by the database.
    sa.Column("vote_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("operation_id", sa.String(70), sa.ForeignKey("proposals.operation_id"), nullable=False),
    sa.Column("principal", sa.String(128), nullable=False),
    sa.Column("decision", sa.String(16), nullable=False),
    # Comma-joined, sorted in code point order (a group name holds no comma: decisionflow.vocabulary.GROUP_NAME).
    sa.Column("groups", sa.Text, nullable=False),
    sa.Column("stage_index", sa.SmallInteger, nullable=False),
    sa.Column("voted_at", _ts, nullable=False),
    sa.UniqueConstraint("operation_id", "principal", name="uq_votes_operation_principal"),
)

# The stages of reviews under a rule escalated by the periodic job (orchestrator.review_timer): from
# escalated_at on, the groups the stage escalates to may decide it too. One row per stage: the key
# decides a race between replicas, and the loser changes nothing.
escalations = sa.Table(
    "escalations",
    metadata,
    sa.Column("operation_id", sa.String(70), sa.ForeignKey("proposals.operation_id"), nullable=False),
    sa.Column("stage_index", sa.SmallInteger, nullable=False),
    sa.Column("escalated_at", _ts, nullable=False),
    sa.PrimaryKeyConstraint("operation_id", "stage_index", name="pk_escalations"),
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
    # When an operator last moved the pending review to the rule in force (reroute-reviews); a decision is
    # recorded only while this is what the deciding call read.
    sa.Column("rerouted_at", _ts, nullable=True),
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

# The audit log's entries: one per event that changes what a case means, inserted in the event's
# transaction, and a queue for the sequencer, which gives each its index in the log once (NULL until
# then). The index is unique: two sequencers can never give one index twice.
_SEQUENCED = sa.text("leaf_index IS NOT NULL")
_UNSEQUENCED = sa.text("leaf_index IS NULL")
audit_entries = sa.Table(
    "audit_entries",
    metadata,
    # Integer on SQLite: only an INTEGER PRIMARY KEY is its rowid, numbered by the database.
    sa.Column("entry_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    # The leaf's canonical bytes (decisionflow.transparency.encode_leaf) and their RFC 9162 leaf hash.
    sa.Column("leaf", sa.LargeBinary, nullable=False),
    sa.Column("leaf_hash", sa.LargeBinary(32), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("operation_id", sa.String(70), nullable=False),
    sa.Column("case_id", sa.String(64), nullable=False),
    sa.Column("recorded_at", _ts, nullable=False),
    sa.Column("leaf_index", sa.BigInteger, nullable=True),
    # The sequencer's queue: the entries without an index, in entry order, found without a scan. It is the
    # one index an event's insert updates; the others hold sequenced entries only, so the sequencer fills
    # them, off the request path. (Measured in process on SQLite: the two leaves of a first Approve cost
    # 0.14 ms of CPU with all four indexes updated by the insert, 0.11 ms with this one.)
    sa.Index("ix_audit_entries_unsequenced", "entry_id", sqlite_where=_UNSEQUENCED, postgresql_where=_UNSEQUENCED),
    sa.Index(
        "ix_audit_entries_leaf_index",
        "leaf_index",
        unique=True,
        sqlite_where=_SEQUENCED,
        postgresql_where=_SEQUENCED,
    ),
    sa.Index("ix_audit_entries_operation_id", "operation_id", sqlite_where=_SEQUENCED, postgresql_where=_SEQUENCED),
    sa.Index("ix_audit_entries_case_id", "case_id", sqlite_where=_SEQUENCED, postgresql_where=_SEQUENCED),
)

# The hash of every perfect subtree of the sequenced log, written when its last leaf is sequenced and
# never changed: level 0 holds the leaf hashes; (level, node_index) covers the leaves
# [node_index * 2^level, (node_index + 1) * 2^level). Roots and proofs read a few of these, never every leaf.
audit_nodes = sa.Table(
    "audit_nodes",
    metadata,
    sa.Column("level", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("node_index", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("hash", sa.LargeBinary(32), nullable=False),
)

# Signed checkpoints: the size and root of the sequenced log, as a C2SP signed note, one per size and
# signing key (a rotated key signs the size the old one signed last).
audit_checkpoints = sa.Table(
    "audit_checkpoints",
    metadata,
    sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
    # The signing key's id, 8 lowercase hex digits (c2sp.org/signed-note).
    sa.Column("key_id", sa.String(8), primary_key=True),
    sa.Column("root_hash", sa.LargeBinary(32), nullable=False),
    sa.Column("signed_note", sa.Text, nullable=False),
    sa.Column("signed_at", _ts, nullable=False),
)
