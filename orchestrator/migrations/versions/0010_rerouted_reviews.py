"""rerouted reviews: when an operator last moved a pending review to the rule in force

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-23 09:00:00.000000

Expand only: one nullable column. ``decisionflow-orchestrator reroute-reviews`` sets
``operations.rerouted_at`` with the proposal's new ``rule_digest``, in the transaction that writes the
``reroute`` leaf. A decision is recorded only while ``rerouted_at`` is what the deciding call read
(orchestrator.store._statements), so a decision taken under the rule a review followed before a
re-route is never recorded after it.

A replica of the previous release never reads the column and records decisions without that check,
so re-route only once every replica runs this release (docs/review-rules.md#re-routing).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from decisionflow_server.storage.schema_compatibility import Expand

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None
compatibility = Expand(oldest="0006")


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("operations") as batch:
        batch.add_column(sa.Column("rerouted_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Revert this revision (re-routed reviews keep the rule they were moved to; when is forgotten)."""
    with op.batch_alter_table("operations") as batch:
        batch.drop_column("rerouted_at")
