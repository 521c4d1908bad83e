"""The receiver's tables (SQLAlchemy Core). The schema itself is created only by the Alembic migrations.

``effects.operation_id`` is UNIQUE: that constraint, not a read before the write, is what
makes an effect happen once per key. ``sequence`` orders a case's effects for paging.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

VERSION_TABLE = "alembic_version_receiver"


class UtcDateTime(sa.types.TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite stores none, so it is re-attached)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Store value as UTC; a naive time is refused since its zone cannot be known."""
        if value is None:
            return None
        if value.utcoffset() is None:
            raise ValueError("naive datetime refused: give a timezone")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        """Return the stored time as an aware UTC datetime."""
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = sa.MetaData()

effects = sa.Table(
    "effects",
    metadata,
    # BIGINT on PostgreSQL; on SQLite only INTEGER PRIMARY KEY is the rowid alias that autoincrements.
    sa.Column("sequence", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("operation_id", sa.String(80), nullable=False),
    sa.Column("case_id", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("payload", sa.LargeBinary(), nullable=False),
    sa.Column("payload_digest", sa.String(64), nullable=False),
    sa.Column("receipt_id", sa.String(64), nullable=False),
    sa.Column("applied_at", UtcDateTime(), nullable=False),
    sa.UniqueConstraint("operation_id", name="uq_effects_operation_id"),
    sa.UniqueConstraint("receipt_id", name="uq_effects_receipt_id"),
    sa.Index("ix_effects_case_id_sequence", "case_id", "sequence"),
    sqlite_autoincrement=True,
)

support_review_records = sa.Table(
    "support_review_records",
    metadata,
    sa.Column(
        "operation_id",
        sa.String(80),
        sa.ForeignKey("effects.operation_id", name="fk_support_review_records_effect"),
        primary_key=True,
    ),
    sa.Column("case_id", sa.String(64), nullable=False),
    sa.Column("body", sa.Text(), nullable=False),
    sa.Column("reviewer", sa.String(256), nullable=False),
    sa.Column("decided_at", UtcDateTime(), nullable=False),
)
