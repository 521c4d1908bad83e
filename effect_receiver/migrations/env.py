"""Alembic environment: runs on the connection and version table that decisionflow.db.migrate provides."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from effect_receiver.schema import metadata

# Any fixed number will do; it only has to differ from the other services' migration locks.
_POSTGRES_MIGRATION_LOCK = 0x5245_4345_4956


def run_migrations() -> None:
    """Upgrade on the caller's connection, inside the caller's transaction."""
    connection: sa.Connection = context.config.attributes["connection"]
    version_table: str = context.config.attributes["version_table"]
    if connection.dialect.name == "postgresql":
        # Replicas starting together would otherwise race to create the same tables; the lock
        # is held until the caller's transaction ends, after which the others see the new head.
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _POSTGRES_MIGRATION_LOCK})
    context.configure(connection=connection, target_metadata=metadata, version_table=version_table)
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
