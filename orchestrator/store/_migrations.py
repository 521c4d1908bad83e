"""Schema revisions of the orchestrator's database (Alembic, under its own version table)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Engine

from decisionflow_server.storage import db

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
VERSION_TABLE = "alembic_version_orchestrator"


def migrate(engine: Engine) -> tuple[str | None, str | None]:
    """Bring the orchestrator database to the newest schema revision; return the revisions before and after."""
    return db.migrate(engine, MIGRATIONS, VERSION_TABLE)
