"""Statements as each database reads them: every column inside a subquery must name its table.

A column without its table inside a subquery is resolved by the database, innermost scope first:
``WHERE operation_id = operation_id`` in a subquery over ``decisions`` compares the subquery's own
column with itself, whatever the statement meant. SQLAlchemy renders some clauses without table
names on some dialects (SQLite's RETURNING), so a statement correct on one database can match
every row on the other. These helpers compile statements for both dialects, parse them as that
database would (sqlglot) and list every unqualified column inside a nested SELECT; and record
every statement a store executes, so a test can check all of them, not a list kept by hand.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
import sqlglot
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect, Engine
from sqlglot import exp

# Named parameters (":name") on PostgreSQL: sqlglot reads them as placeholders, not psycopg's "%(name)s".
DIALECTS: dict[str, Dialect] = {
    "sqlite": sqlite.dialect(),
    "postgres": postgresql.psycopg.dialect(paramstyle="named"),  # type: ignore[no-untyped-call]
}


_EXPANDED_LIST = re.compile(r"__\[POSTCOMPILE_\w+\]")


def compiled(statement: sa.ClauseElement, dialect: str) -> str:
    """Return statement's SQL as dialect's database reads it (an IN list that the driver call expands
    stands as one parameter)."""
    sql = str(statement.compile(dialect=DIALECTS[dialect]))
    return _EXPANDED_LIST.sub(":expanded" if dialect == "postgres" else "?", sql)


def dialects_of(statement: sa.ClauseElement) -> list[str]:
    """Return the dialects a statement compiles for: both, or the one whose own construct it is."""
    module = type(statement).__module__
    own = [name for name in DIALECTS if f".dialects.{'postgresql' if name == 'postgres' else name}." in module]
    return own or list(DIALECTS)


def unqualified_in_subqueries(sql: str, dialect: str) -> list[str]:
    """Return each column of a nested SELECT in sql that does not name its table (empty: all named)."""
    tree = sqlglot.parse_one(sql, read=dialect)
    found: list[str] = []
    for select in tree.find_all(exp.Select):
        if select is tree:
            continue  # a top-level SELECT's own columns resolve in its own FROM alone
        for column in select.find_all(exp.Column):
            if not column.table and column.find_ancestor(exp.Select) is select:
                found.append(f"{column.sql()} in ({select.sql(dialect=dialect)})")
    return found


def unqualified_statements(statements: list[sa.ClauseElement]) -> list[str]:
    """Return, for each statement and dialect where a subquery leaves a column unqualified, a line saying so."""
    problems: list[str] = []
    for statement in statements:
        for dialect in dialects_of(statement):
            sql = compiled(statement, dialect)
            problems += [f"{dialect}: {column}\n  in {sql}" for column in unqualified_in_subqueries(sql, dialect)]
    return problems


class Recorder:
    """The distinct statements executed on an engine, as SQLAlchemy objects (compiled later for both dialects)."""

    def __init__(self) -> None:
        self.statements: dict[str, sa.ClauseElement] = {}

    def _executed(self, _conn: Any, clause: Any, _multi: Any, _params: Any, _options: Any) -> None:
        if isinstance(clause, sa.ClauseElement) and not isinstance(clause, sa.TextClause):
            self.statements.setdefault(str(clause), clause)


@contextmanager
def recording(engine: Engine) -> Iterator[Recorder]:
    """Record every statement object executed on engine while the block runs."""
    recorder = Recorder()
    sa.event.listen(engine, "before_execute", recorder._executed)
    try:
        yield recorder
    finally:
        sa.event.remove(engine, "before_execute", recorder._executed)
