"""Which releases run on a database's schema as it now is: the compatibility record each service keeps
beside its Alembic version table, and the declaration every migration makes.

A rolling upgrade runs two releases side by side: the migration Job brings the schema to the new
release's head, the old replicas keep serving, and an old replica that restarts must still start. The
new revision means nothing to the old code (it ships no script of that name), so the database says
itself which code may run on it: the table ``<version table>_compatibility`` holds one row, the
*oldest compatible* revision, the oldest release head whose code still runs correctly on the schema.
``decisionflow_server.storage.db.migrate`` writes it in the transaction that bumps the version, from the declaration
of the revision it migrated to; a release reads it only when the database is ahead of its own head.

Every migration module declares ``compatibility``, one of:

- ``Expand(oldest=...)``: adds nullable columns, tables or indexes; nothing an older release reads or
  writes changes meaning. ``oldest`` is a strict ancestor, normally the previous release's head.
- ``Contract(oldest=...)``: drops, renames, tightens (NOT NULL without a default) or changes what a
  value means. ``oldest`` is the first release head whose code no longer needs what it takes away: the
  previous release's head when that release already stopped using it (expand, then contract, one
  release apart), or the migration itself when no older code may run on the result.

The record never goes back: a migration's ``oldest`` is never older than its predecessor's
(``tests/migrations/test_compatibility_declarations.py`` checks every migration).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory

RECORD_COLUMN = "oldest_compatible"


@dataclass(frozen=True, slots=True)
class Expand:
    """A migration that only adds: the releases from ``oldest`` on run on its result unchanged."""

    oldest: str
    """The oldest release head whose code runs on the schema after this migration."""


@dataclass(frozen=True, slots=True)
class Contract:
    """A migration that removes or changes meaning: it raises the oldest compatible release to ``oldest``."""

    oldest: str
    """The oldest release head whose code runs on the schema after this migration."""


Compatibility = Expand | Contract


def record_table_name(version_table: str) -> str:
    """Return the name of the compatibility record kept beside version_table (listed next to it)."""
    return f"{version_table}_compatibility"


def record_columns() -> list[sa.Column[str]]:
    """Return the record's one column, as the migration that creates the table declares it."""
    return [sa.Column(RECORD_COLUMN, sa.String(32), primary_key=True)]


def declared(module: ModuleType) -> Compatibility:
    """Return the compatibility a migration module declares; a module that declares none is a defect."""
    compatibility = getattr(module, "compatibility", None)
    if not isinstance(compatibility, Expand | Contract):
        raise TypeError(f"migration {module.__name__} declares no compatibility (Expand or Contract)")
    return compatibility


def shipped(scripts: ScriptDirectory) -> frozenset[str]:
    """Return every revision this release's migrations know (its head and all its ancestors)."""
    return frozenset(script.revision for script in scripts.walk_revisions())


def oldest_of(scripts: ScriptDirectory, revision: str) -> str:
    """Return the oldest compatible revision that revision's migration declares."""
    script = scripts.get_revision(revision)
    assert script is not None, f"revision {revision} is shipped"
    return declared(script.module).oldest


def _record(version_table: str) -> sa.TableClause:
    return sa.table(record_table_name(version_table), sa.column(RECORD_COLUMN, sa.String))


def read(connection: sa.Connection, version_table: str) -> str | None:
    """Return the database's oldest compatible revision, None when it keeps no record (a schema older than
    the record, or none at all)."""
    name = record_table_name(version_table)
    if not sa.inspect(connection).has_table(name):
        return None
    oldest = connection.execute(sa.select(_record(version_table).c[RECORD_COLUMN])).scalar()
    return None if oldest is None else str(oldest)


def write(connection: sa.Connection, version_table: str, oldest: str) -> None:
    """Make oldest the record's one row, in the caller's transaction (the one that bumps the version)."""
    record = _record(version_table)
    connection.execute(record.delete())
    connection.execute(record.insert().values({RECORD_COLUMN: oldest}))
