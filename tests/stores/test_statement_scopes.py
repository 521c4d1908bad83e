"""Every prebuilt statement of both stores, compiled for SQLite and PostgreSQL: no subquery leaves a
column without its table (the statements built per call are checked by the store model tests, which
record every statement they execute)."""

from __future__ import annotations

from types import ModuleType

import pytest
import sqlalchemy as sa

import effect_receiver.store
from orchestrator.schema import decisions, operations
from orchestrator.store import _inbox, _statements, _takeover
from tests.support.sql_scopes import compiled, unqualified_in_subqueries, unqualified_statements


def prebuilt(module: ModuleType) -> list[sa.ClauseElement]:
    """The statements a module builds once, at import."""
    found: list[sa.ClauseElement] = []
    for value in vars(module).values():
        candidates = value.values() if isinstance(value, dict) else [value]
        found += [c for c in candidates if isinstance(c, sa.Executable) and isinstance(c, sa.ClauseElement)]
    return found


@pytest.mark.parametrize("module", [_statements, _takeover, _inbox, effect_receiver.store], ids=lambda m: m.__name__)
def test_prebuilt_statements_name_their_tables_inside_subqueries(module: ModuleType) -> None:
    statements = prebuilt(module)
    assert statements, f"{module.__name__} builds no statement at import"
    assert unqualified_statements(statements) == []


def test_the_check_finds_a_correlation_sqlite_renders_without_table_names() -> None:
    # The shape that answered Approves with the first decision ever recorded on SQLite.
    correlated = sa.select(decisions.c.decision).where(decisions.c.operation_id == operations.c.operation_id)
    statement = operations.update().values(attempts=1).returning(correlated.scalar_subquery().label("decision"))
    assert unqualified_in_subqueries(compiled(statement, "postgres"), "postgres") == []
    assert [p.split(" in ")[0] for p in unqualified_in_subqueries(compiled(statement, "sqlite"), "sqlite")] == [
        "operation_id",
        "operation_id",
    ]
