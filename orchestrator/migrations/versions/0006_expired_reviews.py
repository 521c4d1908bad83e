"""expired reviews: the operation state ``expired``, and proposals found by author

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-10 09:00:00.000000

``decisionflow-orchestrator expire-reviews`` moves abandoned undecided proposals to the state
``expired``, a value of ``operations.state`` that a release before this one cannot read (it fails on
any operation, listing or metric that meets one). So the oldest release that runs on this schema is
this one: a contract, though the schema itself only gains an index.

The index serves the cap on one author's open reviews (orchestrator.quotas), counted on every
StartReview and EditProposal that adds one, and the inbox filtered by author.
"""

from __future__ import annotations

from alembic import op

from decisionflow_server.storage.schema_compatibility import Contract

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None
compatibility = Contract(oldest="0006")


def upgrade() -> None:
    """Apply this revision."""
    op.create_index(op.f("ix_proposals_created_by"), "proposals", ["created_by"], unique=False)


def downgrade() -> None:
    """Revert this revision (expired operations go back to pending review: an older release reads no other)."""
    op.execute("UPDATE operations SET state = 'pending_review' WHERE state = 'expired'")
    op.drop_index(op.f("ix_proposals_created_by"), table_name="proposals")
