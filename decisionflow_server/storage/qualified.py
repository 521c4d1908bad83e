"""Scalar subqueries whose columns name their tables on every dialect.

SQLAlchemy's SQLite dialect renders a RETURNING clause with unqualified column names, and the
flag that does it reaches into any subquery of that clause too: the correlated
``decisions.operation_id = operations.operation_id`` of a subquery in ``UPDATE operations …
RETURNING`` becomes ``operation_id = operation_id``, which SQLite resolves to the subquery's own
table on both sides, so the subquery matches every row and answers the first one's values.
PostgreSQL renders the same statement qualified. ``qualified(subquery)`` renders the subquery
as a SELECT anywhere else is rendered, tables named, whatever clause holds it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal, _TraverseInternalsType


class Qualified(ColumnElement[Any]):
    """A scalar subquery rendered with table-qualified columns in every clause and dialect."""

    __visit_name__ = "decisionflow_qualified"
    inherit_cache = True
    _traverse_internals: _TraverseInternalsType = [("subquery", InternalTraversal.dp_clauseelement)]  # noqa: RUF012

    def __init__(self, subquery: sa.ScalarSelect[Any]) -> None:
        self.subquery = subquery
        self.type = subquery.type


def qualified(subquery: sa.ScalarSelect[Any]) -> Qualified:
    """Wrap a scalar subquery so that its columns keep their table names (see the module docstring)."""
    return Qualified(subquery)


@compiles(Qualified)
def _compile_qualified(element: Qualified, compiler: SQLCompiler, **kw: Any) -> str:
    # A RETURNING clause's "no table names" applies to its own columns, never to a nested SELECT's.
    kw.pop("include_table", None)
    return compiler.process(element.subquery, **kw)
