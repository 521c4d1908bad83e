"""proposal authors: who created a proposal or any in its chain, stored with it

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-08 09:00:00.000000

Expand only: the column is nullable, so a replica of the previous release may still insert rows
during an upgrade (the store reads the authors of such a row from its chain of parents). Rows
already present are filled here from the parent links they recorded.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from decisionflow_server.storage.schema_compatibility import Expand

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None
compatibility = Expand(oldest="0002")

_proposals = sa.table(
    "proposals",
    sa.column("operation_id", sa.String),
    sa.column("parent_operation_id", sa.String),
    sa.column("created_by", sa.String),
    sa.column("authors_json", sa.Text),
)


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("proposals") as batch:
        batch.add_column(sa.Column("authors_json", sa.Text(), nullable=True))
    conn = op.get_bind()
    links = {
        row.operation_id: (row.parent_operation_id, row.created_by)
        for row in conn.execute(
            sa.select(_proposals.c.operation_id, _proposals.c.parent_operation_id, _proposals.c.created_by)
        )
    }
    update = (
        _proposals.update()
        .where(_proposals.c.operation_id == sa.bindparam("b_operation_id"))
        .values(authors_json=sa.bindparam("b_authors"))
    )
    rows = [
        {"b_operation_id": operation_id, "b_authors": json.dumps(sorted(_chain_authors(links, operation_id)))}
        for operation_id in links
    ]
    if rows:
        conn.execute(update, rows)


def _chain_authors(links: dict[str, tuple[str | None, str]], operation_id: str) -> set[str]:
    """Return the creators along the parent links from operation_id (a cycle, which cannot be, ends)."""
    authors: set[str] = set()
    seen: set[str] = set()
    current: str | None = operation_id
    while current is not None and current in links and current not in seen:
        seen.add(current)
        parent, created_by = links[current]
        authors.add(created_by)
        current = parent
    return authors


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("proposals") as batch:
        batch.drop_column("authors_json")
