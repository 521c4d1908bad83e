"""Alembic environment: runs on the connection and version table that decisionflow_server.storage.db.migrate provides.

decisionflow_server.storage.db.migrate holds the transaction (and, on PostgreSQL, the advisory lock that lets
replicas starting together take turns), so nothing here commits.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from effect_receiver.schema import metadata


def run_migrations() -> None:
    """Upgrade on the caller's connection, inside the caller's transaction."""
    connection: sa.Connection = context.config.attributes["connection"]
    version_table: str = context.config.attributes["version_table"]
    context.configure(connection=connection, target_metadata=metadata, version_table=version_table)
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
