"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from decisionflow_server.storage.schema_compatibility import Expand
${imports if imports else ""}

revision: str = ${repr(up_revision)}
down_revision: str | None = ${repr(down_revision)}
branch_labels: str | None = ${repr(branch_labels)}
depends_on: str | None = ${repr(depends_on)}
# Expand: only adds, and the previous release runs on the result. Anything that drops, renames,
# tightens or changes a meaning is a Contract (decisionflow_server.storage.schema_compatibility).
compatibility = Expand(oldest=${repr(down_revision)})


def upgrade() -> None:
    """Upgrade the schema."""
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    """Downgrade the schema."""
    ${downgrades if downgrades else "pass"}
