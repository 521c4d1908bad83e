"""Effects keyed once by operation id, and the support review records written with them.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from decisionflow_server.storage.schema_compatibility import Expand

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None
# The first schema: no older code exists to run on it.
compatibility = Expand(oldest="0001")


def upgrade() -> None:
    """Create effects and support_review_records."""
    op.create_table(
        "effects",
        sa.Column("sequence", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("operation_id", sa.String(80), nullable=False),
        sa.Column("case_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("payload_digest", sa.String(64), nullable=False),
        sa.Column("receipt_id", sa.String(64), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("operation_id", name="uq_effects_operation_id"),
        sa.UniqueConstraint("receipt_id", name="uq_effects_receipt_id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_effects_case_id_sequence", "effects", ["case_id", "sequence"])
    op.create_table(
        "support_review_records",
        sa.Column("operation_id", sa.String(80), primary_key=True),
        sa.Column("case_id", sa.String(64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("reviewer", sa.String(256), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["operation_id"], ["effects.operation_id"], name="fk_support_review_records_effect"),
    )


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("support_review_records")
    op.drop_index("ix_effects_case_id_sequence", table_name="effects")
    op.drop_table("effects")
