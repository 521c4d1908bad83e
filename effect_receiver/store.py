"""The receiver's database: effects written once per operation id, with their business records.

Each public method is one transaction. Once-per-key is the UNIQUE constraint on
``effects.operation_id`` and one INSERT: concurrent duplicates queue on that constraint
(PostgreSQL) or on the write lock taken by ``BEGIN IMMEDIATE`` (SQLite), and every loser
reads the winner's row and replays its receipt. The INSERT absorbs a conflict on that key alone
(``ON CONFLICT (operation_id) DO NOTHING``): it inserts no row, the transaction goes on to read
the winner's, and a violation of any other constraint still fails the statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from decisionflow.vocabulary import ApplyResult, CaseId, OperationId, Receipt
from decisionflow_server.foundation.errors import Unavailable
from decisionflow_server.storage import db
from decisionflow_server.storage.transactions import Transactions
from effect_receiver.domain import AppliedEffect, ApplyAnswer, Effect, EffectPage
from effect_receiver.errors import IdempotencyKeyReused
from effect_receiver.schema import VERSION_TABLE, effects, support_review_records

MIGRATIONS = Path(__file__).resolve().parent / "migrations"

_RECEIPT_COLUMNS = (effects.c.receipt_id, effects.c.operation_id, effects.c.applied_at)


def _insert_once(insert: Any) -> Any:
    """Apply's INSERT in a dialect's spelling: one row, or none when an effect has this operation id."""
    return insert(effects).on_conflict_do_nothing(index_elements=[effects.c.operation_id]).returning(effects.c.sequence)


# Apply's and Lookup's statements, built once: a statement built per call with .values() is compiled from
# the cache but still pays for its construction and cache key, which cost more than the insert.
_INSERT_EFFECT_ONCE = {"postgresql": _insert_once(postgresql.insert), "sqlite": _insert_once(sqlite.insert)}
_INSERT_RECORD = support_review_records.insert()
_STORED_EFFECT = sa.select(effects.c.payload_digest, *_RECEIPT_COLUMNS).where(
    effects.c.operation_id == sa.bindparam("b_operation_id")
)
_RECEIPT = sa.select(*_RECEIPT_COLUMNS).where(effects.c.operation_id == sa.bindparam("b_operation_id"))


def migrate(engine: Engine) -> tuple[str | None, str | None]:
    """Bring the receiver's schema behind engine to the newest revision (idempotent); return the revisions
    before and after."""
    return db.migrate(engine, MIGRATIONS, VERSION_TABLE)


def _receipt(row: sa.Row[*tuple[Any, ...]]) -> Receipt:
    return Receipt(receipt_id=row.receipt_id, operation_id=OperationId(row.operation_id), applied_at=row.applied_at)


class EffectStore:
    """Effects and support review records in one database (the primary, or a read replica)."""

    def __init__(self, engine: Engine) -> None:
        # Every SQLite transaction opens with BEGIN IMMEDIATE, so they run one at a time anyway;
        # the write turn keeps them out of SQLite's busy handler and its sleeps of up to 100 ms
        # (16 callers: Apply p99 about 0.2 s with a turn, 1.2 s without). Apply's INSERT absorbs its
        # key's conflict instead of raising it: on PostgreSQL a raised violation aborts the whole
        # transaction, and a savepoint around the INSERT cost two statements more per Apply.
        self._transactions = Transactions(engine, database="receiver")
        self._insert_effect = _INSERT_EFFECT_ONCE[engine.dialect.name]

    @property
    def engine(self) -> Engine:
        """The engine this store runs its transactions on."""
        return self._transactions.engine

    def apply(self, effect: Effect, receipt: Receipt) -> ApplyAnswer:
        """Write effect and its record under receipt once; a repeat replays the stored receipt or is refused.

        Raises IdempotencyKeyReused when the stored effect has another payload digest (it is
        left unchanged) and Unavailable when the database cannot be reached.
        """

        def work(conn: sa.Connection) -> ApplyAnswer:
            inserted = conn.execute(
                self._insert_effect,
                {
                    "operation_id": effect.operation_id,
                    "case_id": effect.case_id,
                    "kind": effect.kind,
                    "payload": effect.payload,
                    "payload_digest": effect.payload_digest,
                    "receipt_id": receipt.receipt_id,
                    "applied_at": receipt.applied_at,
                },
            ).first()
            if inserted is None:  # an effect with this key exists: replay it, or refuse its reuse
                return self._replay_txn(conn, effect)
            conn.execute(
                _INSERT_RECORD,
                {
                    "operation_id": effect.operation_id,
                    "case_id": effect.case_id,
                    "body": effect.body,
                    "reviewer": effect.reviewer,
                    "decided_at": effect.decided_at,
                },
            )
            return ApplyAnswer(ApplyResult.CREATED, receipt)

        return self._transactions.batched(work)

    def _replay_txn(self, conn: sa.Connection, effect: Effect) -> ApplyAnswer:
        # Read committed: the INSERT found the key taken by a committed row (PostgreSQL waited for
        # its writer; SQLite holds the write lock), and this statement sees that row.
        row = conn.execute(_STORED_EFFECT, {"b_operation_id": effect.operation_id}).one_or_none()
        if row is None:  # a prune deleted it in between (PostgreSQL); the retry writes it anew
            raise Unavailable(f"the effect of {effect.operation_id} was pruned while it was replayed; retry")
        if row.payload_digest != effect.payload_digest:
            raise IdempotencyKeyReused(effect.operation_id)
        return ApplyAnswer(ApplyResult.REPLAYED, _receipt(row))

    def replay(self, effect: Effect) -> ApplyAnswer | None:
        """Replay the stored receipt of effect's key, or return None when it is absent; never writes.

        Raises IdempotencyKeyReused when the stored effect has another payload digest.
        """
        # No INSERT at all: an Apply that may only replay cannot write a second effect, whatever a
        # concurrent prune does between this read and the reply.
        with self._transactions.write() as conn:
            row = conn.execute(_STORED_EFFECT, {"b_operation_id": effect.operation_id}).one_or_none()
        if row is None:
            return None
        if row.payload_digest != effect.payload_digest:
            raise IdempotencyKeyReused(effect.operation_id)
        return ApplyAnswer(ApplyResult.REPLAYED, _receipt(row))

    def lookup(self, operation_id: OperationId) -> Receipt | None:
        """Return the receipt of the effect written under operation_id, or None when there is none."""
        with self._transactions.read() as conn:
            row = conn.execute(_RECEIPT, {"b_operation_id": operation_id}).one_or_none()
        return None if row is None else _receipt(row)

    def batch_lookup(self, operation_ids: Sequence[OperationId]) -> dict[OperationId, Receipt]:
        """Return the receipts of those operation_ids that have an effect, in one query."""
        wanted = sorted(set(operation_ids))
        with self._transactions.read() as conn:
            rows = conn.execute(sa.select(*_RECEIPT_COLUMNS).where(effects.c.operation_id.in_(wanted))).all()
        return {receipt.operation_id: receipt for receipt in map(_receipt, rows)}

    def list_effects(self, case_id: CaseId, *, after: int, limit: int) -> EffectPage:
        """Return up to limit effects of case_id with a sequence above after, oldest first."""
        query = (
            sa.select(
                effects.c.sequence,
                effects.c.operation_id,
                effects.c.case_id,
                effects.c.kind,
                effects.c.payload_digest,
                effects.c.receipt_id,
                effects.c.applied_at,
                support_review_records.c.body,
                support_review_records.c.reviewer,
            )
            .join(support_review_records, support_review_records.c.operation_id == effects.c.operation_id)
            .where(effects.c.case_id == case_id, effects.c.sequence > after)
            .order_by(effects.c.sequence)
            .limit(limit + 1)  # one more than asked tells whether a next page exists
        )
        with self._transactions.read() as conn:
            rows = conn.execute(query).all()
        page = tuple(
            AppliedEffect(
                sequence=row.sequence,
                operation_id=OperationId(row.operation_id),
                case_id=CaseId(row.case_id),
                kind=row.kind,
                payload_digest=row.payload_digest,
                body=row.body,
                reviewer=row.reviewer,
                receipt=_receipt(row),
            )
            for row in rows[:limit]
        )
        return EffectPage(page, page[-1].sequence if len(rows) > limit else None)

    def count_effects(self) -> int:
        """Return how many effects are stored (all cases)."""
        with self._transactions.read() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(effects)).scalar_one())

    def count_keys_before(self, cutoff: datetime) -> int:
        """Return how many effects were applied before cutoff (what prune_keys_before would delete)."""
        query = sa.select(sa.func.count()).select_from(effects).where(effects.c.applied_at < cutoff)
        with self._transactions.read() as conn:
            return int(conn.execute(query).scalar_one())

    def prune_keys_before(self, cutoff: datetime, *, limit: int) -> int:
        """Delete up to limit of the oldest effects applied before cutoff, with their business records, in
        one transaction; return how many effects it deleted (fewer than limit: none older is left)."""
        # Oldest first along the primary key: pruned rows are the table's first ones, so each batch
        # finds its rows at the start of the index instead of scanning for applied_at.
        oldest = (
            sa.select(effects.c.operation_id)
            .where(effects.c.applied_at < cutoff)
            .order_by(effects.c.sequence)
            .limit(limit)
        )
        with self._transactions.write() as conn:
            keys = list(conn.execute(oldest).scalars())
            if not keys:
                return 0
            conn.execute(support_review_records.delete().where(support_review_records.c.operation_id.in_(keys)))
            # A concurrent prune may have deleted some of these already; only this one's deletions count.
            deleted = conn.execute(effects.delete().where(effects.c.operation_id.in_(keys))).rowcount
        return int(deleted)
