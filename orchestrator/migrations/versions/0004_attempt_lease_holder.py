"""attempt lease holder: which orchestrator process holds an operation's lease

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-08 10:00:00.000000

Expand only: nullable, and a replica of the previous release that takes a lease leaves it empty.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from decisionflow_server.storage.schema_compatibility import Expand

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None
compatibility = Expand(oldest="0003")


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("operations") as batch:
        batch.add_column(sa.Column("attempt_lease_holder", sa.String(length=200), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("operations") as batch:
        batch.drop_column("attempt_lease_holder")
