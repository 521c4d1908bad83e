"""attempt lease: who may drive an operation's Apply now

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from decisionflow_server.storage.schema_compatibility import Expand

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None
compatibility = Expand(oldest="0001")


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("operations") as batch:
        batch.add_column(sa.Column("attempt_lease_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("operations") as batch:
        batch.drop_column("attempt_lease_until")
