"""The receiver's tables (SQLAlchemy Core). The schema itself is created only by the Alembic migrations.

``effects.operation_id`` is UNIQUE: that constraint, not a read before the write, is what
makes an effect happen once per key. ``sequence`` orders a case's effects for paging.
"""

from __future__ import annotations

import sqlalchemy as sa

from decisionflow_server.storage.db import UtcDateTime

VERSION_TABLE = "alembic_version_receiver"


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
