"""Alembic environment: runs on the connection handed over by decisionflow_server.storage.db.migrate."""

from __future__ import annotations

from alembic import context

from orchestrator.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=context.config.attributes["version_table"],
)
with context.begin_transaction():
    context.run_migrations()
