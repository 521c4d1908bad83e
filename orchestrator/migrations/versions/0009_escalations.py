"""escalations: the stages of reviews under a rule escalated by the orchestrator's periodic job

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-22 09:00:00.000000

Expand only: one new table. A row records that a stage of a review under a rule other than the
default one was due and escalated at ``escalated_at``: from then on the groups the stage escalates to
may decide it too. ``UNIQUE(operation_id, stage_index)``: a stage is escalated once, whichever replica
gets there first.

A replica of the previous release never reads the table: it decides votes as if no stage were
escalated (a member of an escalation group is refused there until every replica runs this release).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from decisionflow_server.storage.schema_compatibility import Expand

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None
compatibility = Expand(oldest="0006")


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "escalations",
        sa.Column("operation_id", sa.String(length=70), nullable=False),
        sa.Column("stage_index", sa.SmallInteger(), nullable=False),
        sa.Column("escalated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["operation_id"], ["proposals.operation_id"]),
        sa.PrimaryKeyConstraint("operation_id", "stage_index", name="pk_escalations"),
    )


def downgrade() -> None:
    """Revert this revision (the escalations go: escalation groups may no longer decide those stages)."""
    op.drop_table("escalations")
