"""audit log: its entries, the hashes of its perfect subtrees, and its signed checkpoints

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-14 09:00:00.000000

Expand only: three new tables that the previous release never reads. A replica of that release,
still serving during a rolling upgrade, writes its events without their leaves: the log holds the
events of the releases from this one on (docs/audit-log.md, "The log in the orchestrator").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from decisionflow_server.storage.schema_compatibility import Expand

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None
compatibility = Expand(oldest="0006")

_UNSEQUENCED = sa.text("leaf_index IS NULL")
_SEQUENCED = sa.text("leaf_index IS NOT NULL")


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "audit_entries",
        sa.Column("entry_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("leaf", sa.LargeBinary(), nullable=False),
        sa.Column("leaf_hash", sa.LargeBinary(length=32), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("operation_id", sa.String(length=70), nullable=False),
        sa.Column("case_id", sa.String(length=64), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("leaf_index", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("entry_id"),
    )
    # Only the queue's index holds unsequenced entries: an event's insert updates no other (schema.py).
    op.create_index(
        "ix_audit_entries_unsequenced",
        "audit_entries",
        ["entry_id"],
        unique=False,
        sqlite_where=_UNSEQUENCED,
        postgresql_where=_UNSEQUENCED,
    )
    for name, column, unique in (
        ("ix_audit_entries_leaf_index", "leaf_index", True),
        ("ix_audit_entries_operation_id", "operation_id", False),
        ("ix_audit_entries_case_id", "case_id", False),
    ):
        op.create_index(
            name, "audit_entries", [column], unique=unique, sqlite_where=_SEQUENCED, postgresql_where=_SEQUENCED
        )
    op.create_table(
        "audit_nodes",
        sa.Column("level", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("node_index", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("hash", sa.LargeBinary(length=32), nullable=False),
        sa.PrimaryKeyConstraint("level", "node_index"),
    )
    op.create_table(
        "audit_checkpoints",
        sa.Column("size", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("key_id", sa.String(length=8), nullable=False),
        sa.Column("root_hash", sa.LargeBinary(length=32), nullable=False),
        sa.Column("signed_note", sa.Text(), nullable=False),
        sa.Column("signed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("size", "key_id"),
    )


def downgrade() -> None:
    """Revert this revision (the log is dropped with its checkpoints: auditors keep what they fetched)."""
    op.drop_table("audit_checkpoints")
    op.drop_table("audit_nodes")
    for name in (
        "ix_audit_entries_case_id",
        "ix_audit_entries_operation_id",
        "ix_audit_entries_leaf_index",
        "ix_audit_entries_unsequenced",
    ):
        op.drop_index(name, table_name="audit_entries")
    op.drop_table("audit_entries")
