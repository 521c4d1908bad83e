"""compatibility record: the oldest release whose code runs on this schema

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 09:00:00.000000

Expand only: a new table that the previous release never reads. From here on, a release whose head is
older than the database's revision reads the record to know whether it may still run
(decisionflow_server.storage.schema_compatibility);
decisionflow_server.storage.db.migrate writes its row with every upgrade.
"""

from __future__ import annotations

from alembic import op

from decisionflow_server.storage.schema_compatibility import Expand, record_columns, record_table_name

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None
compatibility = Expand(oldest="0004")


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(record_table_name(op.get_context().version_table), *record_columns())


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table(record_table_name(op.get_context().version_table))
