"""review rules: the rule each proposal follows, and the votes of reviews under a rule

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-21 09:00:00.000000

Expand only: two new tables and a nullable column. ``proposals.rule_digest`` names the review rule
captured when the proposal was recorded (a row of ``review_rules``, by its digest); NULL means the
action's default rule (one stage, any reviewer, one approval), which is what every review started
before this revision follows. ``votes`` holds the votes of reviews under another rule.

A replica of the previous release reads and writes as before and leaves ``rule_digest`` NULL: its
proposals follow the default rule. It decides every proposal by the default rule, so give the
orchestrator a rules file only once every replica runs this release (docs/review-rules.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from decisionflow_server.storage.schema_compatibility import Expand

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None
compatibility = Expand(oldest="0006")


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "review_rules",
        sa.Column("digest", sa.String(length=72), nullable=False),
        sa.Column("encoded", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("digest"),
    )
    with op.batch_alter_table("proposals") as batch:
        batch.add_column(sa.Column("rule_digest", sa.String(length=72), nullable=True))
    op.create_table(
        "votes",
        sa.Column("vote_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("operation_id", sa.String(length=70), nullable=False),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("groups", sa.Text(), nullable=False),
        sa.Column("stage_index", sa.SmallInteger(), nullable=False),
        sa.Column("voted_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["operation_id"], ["proposals.operation_id"]),
        sa.PrimaryKeyConstraint("vote_id"),
        sa.UniqueConstraint("operation_id", "principal", name="uq_votes_operation_principal"),
    )


def downgrade() -> None:
    """Revert this revision (the votes and captured rules go: reviews under a rule follow the default one)."""
    op.drop_table("votes")
    with op.batch_alter_table("proposals") as batch:
        batch.drop_column("rule_digest")
    op.drop_table("review_rules")
