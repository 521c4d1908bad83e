"""Schema revisions, explicitly: ``<program> migrate`` (and ``migrate --show``), ``--migrate auto|off`` at
start-up, and opening an existing database for housekeeping without creating or upgrading it.

- ``migrate`` applies the pending Alembic migrations and prints the revision before and after; it is
  the one command that may create a database. On PostgreSQL the upgrade holds an advisory lock
  (``decisionflow_server.storage.db.migrate``), so replicas and ``migrate`` commands started together take turns.
  Each upgrade also writes the database's compatibility record (``decisionflow_server.storage.schema_compatibility``):
  the oldest release head whose code still runs on the schema.
- ``migrate --show`` prints the current and the head revision, the oldest compatible revision and
  whether this release runs on the database, and changes nothing: a missing SQLite file is reported
  as missing, never created.
- A database older than this release's head: a server under ``--migrate auto`` (the default) migrates
  it at start; under ``off`` it refuses to start (exit 2, one line naming the revision found, the one
  needed and the command to run).
- A database newer than this release's head (a rolling upgrade: the new release's migration ran first):
  under either mode a server starts without migrating, and logs one line saying so, when the record's
  oldest compatible revision is one this release ships (its head or an ancestor); otherwise it refuses
  (exit 2, one line naming the revision found, the oldest compatible one, this release's head, and to
  upgrade this replica's release). ``migrate`` says the same and changes nothing: exit 0 when this
  release runs on the database (a rollback re-running an older release's migration Job goes through),
  2 when it does not. Nothing here ever downgrades a schema.
- Housekeeping opens the database with ``open_existing``, under the same rule: a missing SQLite file, a
  schema older than the head or one newer and incompatible is a configuration error (exit 2), and
  nothing is created.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine

from decisionflow_server.foundation import arguments
from decisionflow_server.foundation.settings import Setting, SettingError, add_settings, parse_settings
from decisionflow_server.foundation.startup_errors import (
    StartupError,
    configuration_error,
    describe,
    report,
    runtime_error,
)
from decisionflow_server.storage import db, schema_compatibility

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory


@dataclass(frozen=True, slots=True)
class Schema:
    """One service's migrations and the settings that name its database."""

    program: str
    """The service's command, e.g. ``decisionflow-orchestrator``."""
    service: str
    """The ``service`` field of its log lines."""
    script_location: Path
    """The Alembic scripts directory."""
    version_table: str
    """The table recording the service's revision."""
    database_url: Setting[str]
    """``--database-url``."""
    database_url_file: Setting[str]
    """``--database-url-file``."""
    migrate: Setting[bool]
    """``--migrate`` (auto or off)."""
    log_level: Setting[str]
    """``--log-level``."""

    @property
    def scripts(self) -> ScriptDirectory:
        """The service's migrations as Alembic reads them."""
        from alembic.script import ScriptDirectory

        return ScriptDirectory.from_config(db.alembic_config(self.script_location, self.version_table))

    @property
    def head(self) -> str:
        """The newest revision this version of the service ships."""
        head = self.scripts.get_current_head()
        assert head is not None, "a service ships at least one migration"
        return head


@dataclass(frozen=True, slots=True)
class Revisions:
    """Where a database stands against this release: its revision (None: none recorded), the release's head,
    the database's compatibility record and the revisions the release ships."""

    current: str | None
    head: str
    oldest_compatible: str | None = None
    """The oldest release head whose code runs on the database's schema (None: it keeps no record)."""
    shipped: frozenset[str] = field(default=frozenset(), repr=False)
    """Every revision this release's migrations know."""

    @property
    def at_head(self) -> bool:
        """True when the database has exactly the schema the service needs."""
        return self.current == self.head

    @property
    def newer(self) -> bool:
        """True when the database is at a revision this release does not ship: a newer release migrated it."""
        return self.current is not None and self.current not in self.shipped

    @property
    def runs_here(self) -> bool:
        """True when this release runs on the database as it is: at the head, or newer with a record whose
        oldest compatible revision this release ships (its head or an ancestor)."""
        return self.at_head or (self.newer and self.oldest_compatible in self.shipped)

    def describe_newer(self) -> str:
        """Return ``revision R, newer than this release's head H, compatible from C`` for a newer database."""
        compatible = (
            f"compatible from {self.oldest_compatible}" if self.oldest_compatible else "with no compatibility record"
        )
        return f"revision {self.current}, newer than this release's head {self.head}, {compatible}"


def sqlite_file(engine: Engine) -> Path | None:
    """Return the file behind a SQLite engine, None for another database or one held in memory."""
    database = engine.url.database
    if not db.is_sqlite(engine) or not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _missing_file(engine: Engine) -> Path | None:
    path = sqlite_file(engine)
    return path if path is not None and not path.exists() else None


# How every migration names itself and its parent (a string literal, or None for the first; annotated or not),
# the one form linear_revisions reads.
_REVISION = re.compile(r'^revision(?:: [\w |]+)? = "(\w+)"$', re.MULTILINE)
_DOWN_REVISION = re.compile(r'^down_revision(?:: [\w |]+)? = (?:"(\w+)"|None)$', re.MULTILINE)


def linear_revisions(script_location: Path) -> tuple[str, ...] | None:
    """Return the revisions of the migrations under script_location, first to head, read from the files Alembic
    reads (``versions/*.py``) without importing Alembic or them; None unless each file names its revision and its
    parent in the plain form and they make one line (then the caller asks Alembic)."""
    children: dict[str | None, str] = {}
    for path in (script_location / "versions").iterdir():
        if not path.name.endswith(".py") or path.name.startswith((".#", "__init__")):
            continue
        text = path.read_text(encoding="utf-8")
        revision, parent = _REVISION.findall(text), _DOWN_REVISION.findall(text)
        if len(revision) != 1 or len(parent) != 1 or (parent[0] or None) in children:
            return None
        children[parent[0] or None] = revision[0]
    chain: list[str] = []
    child = children.get(None)
    while child is not None:
        chain.append(child)
        child = children.get(child)
    return tuple(chain) if chain and len(chain) == len(children) else None


def _head_and_shipped(schema: Schema) -> tuple[str, frozenset[str]]:
    # A server's start reads these on every start: Alembic (about a tenth of a second of imports) only when
    # the plain reading cannot tell.
    chain = linear_revisions(schema.script_location)
    if chain is not None:
        return chain[-1], frozenset(chain)
    scripts = schema.scripts
    head = scripts.get_current_head()
    assert head is not None, "a service ships at least one migration"
    return head, schema_compatibility.shipped(scripts)


def revisions(engine: Engine, schema: Schema) -> Revisions:
    """Return where the database behind engine stands; a missing SQLite file is not created."""
    head, shipped = _head_and_shipped(schema)
    if _missing_file(engine) is not None:
        return Revisions(None, head, None, shipped)
    with db.reading(engine) as connection:
        current = db.current_revision(connection, schema.version_table)
        oldest = schema_compatibility.read(connection, schema.version_table)
    return Revisions(current, head, oldest, shipped)


def _found(current: Revisions, engine: Engine) -> str:
    missing = _missing_file(engine)
    if missing is not None:
        return f"no database file at {missing}"
    return f"revision {current.current}" if current.current else "no revision (an empty database)"


def require_runnable(engine: Engine, schema: Schema, settings: Sequence[Setting[Any]]) -> Revisions:
    """Return where the database stands when this release runs on it as it is (at the head, or newer and
    compatible); otherwise raise a configuration StartupError naming settings and what to do."""
    current = revisions(engine, schema)
    if current.runs_here:
        return current
    if current.newer:
        raise configuration_error(
            "the database schema is newer than this release runs on",
            settings,
            f"found {current.describe_newer()}; upgrade this replica's release to one that ships revision "
            f"{current.oldest_compatible or current.current}",
        )
    raise configuration_error(
        "the database schema is not the one this version needs",
        settings,
        f"found {_found(current, engine)}, needs revision {current.head}; run {schema.program} migrate "
        "with the same database settings",
    )


def prepare(engine: Engine, schema: Schema, *, auto: bool) -> Revisions:
    """At a server's start: migrate an older database to the head revision (auto) or refuse it (off); run on a
    newer one, migrating nothing, when its compatibility record admits this release, else refuse. Return
    where the database stands (``newer`` true: the caller says so in its log)."""
    # A database at the head (most starts) or newer (migrate leaves it as it is) is only read: the upgrade, its
    # lock and Alembic are skipped.
    found = revisions(engine, schema) if auto else None
    if found is not None and not (found.at_head or found.newer):
        db.migrate(engine, schema.script_location, schema.version_table)
    return require_runnable(engine, schema, (schema.migrate, schema.database_url))


def _shown(current: Revisions, engine: Engine, prog: str) -> str:
    if current.newer:
        verdict = "this release runs on it" if current.runs_here else "this release cannot run on it; upgrade it"
        return f"{current.describe_newer()}: {verdict}"
    compatible = f", compatible from {current.oldest_compatible}" if current.oldest_compatible else ""
    return f"{_found(current, engine)}{compatible}; head is {current.head}" + (
        "" if current.at_head else f"; run {prog} to upgrade"
    )


def open_existing(url: str, schema: Schema) -> Engine:
    """Return an engine on an existing database this release runs on (at the head revision, or newer and
    compatible), creating and migrating nothing; a missing SQLite file, an older schema or a newer
    incompatible one raises a configuration StartupError, an unreachable database a runtime one."""
    settings: tuple[Setting[str], ...] = (schema.database_url, schema.database_url_file)
    engine = database_engine(url, schema.database_url)
    try:
        missing = _missing_file(engine)
        if missing is not None:
            # Connecting would create the file: a mistyped path must leave nothing behind.
            raise configuration_error(
                f"no database at {missing}", settings, f"no such file; {schema.program} migrate creates a database"
            )
        with opening_database(schema.database_url):
            require_runnable(engine, schema, settings)
    except BaseException:
        engine.dispose()
        raise
    return engine


def migrate_command(
    schema: Schema, argv: Sequence[str], configure_logging: Callable[[str], None], logger: logging.Logger
) -> int:
    """Run ``<program> migrate [--show]``: print one JSON line on stdout and a summary on stderr; return the
    exit status (0 done or nothing to do, 2 bad settings or a newer database this release cannot run on, 1
    database unreachable or failing)."""
    prog = f"{schema.program} migrate"
    cli = arguments.ArgumentParser(
        prog=prog,
        description="Apply the pending schema migrations and print the revision before and after (creates the "
        "database if it does not exist); a database a newer release migrated is left as it is. With --show, print "
        "where the database stands and change nothing.",
    )
    settings = (schema.database_url, schema.database_url_file, schema.log_level)
    add_settings(cli, settings)
    cli.add_argument(
        "--show",
        action="store_true",
        help="print the current and the head revision, the oldest compatible one and whether this release "
        "runs on the database; change nothing",
    )
    ns = cli.parse_args(list(argv))
    from alembic.util import CommandError

    try:
        values = parse_settings(ns, settings, os.environ)
        url = values.required_one_of(schema.database_url, schema.database_url_file)
    except SettingError as error:
        cli.error(str(error))
    level = values.required(schema.log_level)
    configure_logging(level)
    try:
        engine = database_engine(url, schema.database_url)
        try:
            with opening_database(schema.database_url):
                if ns.show:
                    current = revisions(engine, schema)
                    document: dict[str, object] = {
                        "command": "migrate",
                        "show": True,
                        "current": current.current,
                        "head": current.head,
                        "at_head": current.at_head,
                        "oldest_compatible": current.oldest_compatible,
                        "compatible": current.runs_here,
                    }
                    summary = _shown(current, engine, prog)
                else:
                    before, after = db.migrate(engine, schema.script_location, schema.version_table)
                    document = {"command": "migrate", "show": False, "before": before, "after": after}
                    # A newer release's database is left as it is: fine when this release runs on it, else exit 2.
                    current = require_runnable(engine, schema, (schema.database_url,))
                    if current.newer:
                        summary = f"found {current.describe_newer()}: this release runs on it; nothing to migrate"
                    elif before == after:
                        summary = f"already at revision {after}"
                    else:
                        summary = f"migrated from {before or 'an empty database'} to revision {after}"
        except CommandError as exc:
            # Alembic could not plan the upgrade (a newer database is caught before it is asked).
            raise runtime_error("cannot migrate", (schema.database_url,), describe(exc)) from exc
        finally:
            engine.dispose()
    except StartupError as error:
        return report(prog, error, logger, debug=level == "debug", service=schema.service)
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stderr.write(f"{prog}: {summary}\n")
    return 0


def database_engine(url: str, setting: Setting[Any]) -> Engine:
    """Return an engine for url; a URL that cannot be parsed or has no driver is a configuration error."""
    try:
        return db.create_engine(url)
    except Exception as exc:  # sqlalchemy's ArgumentError, a ValueError for a bad port, an ImportError
        raise configuration_error(
            "cannot use the database URL", (setting,), f"{type(exc).__name__}: {describe(exc)}"
        ) from exc


@contextmanager
def opening_database(setting: Setting[Any]) -> Iterator[None]:
    """Turn a database error inside (connection refused, no such database, not a database file) into a
    runtime StartupError naming setting; a database the services cannot use (not UTF8) into a configuration
    one."""
    from sqlalchemy.exc import DBAPIError

    try:
        yield
    except db.UnsupportedDatabase as exc:
        # A database the services cannot use as it was created: no retry helps, as with a bad setting.
        raise configuration_error("cannot use the database", (setting,), describe(exc)) from exc
    except DBAPIError as exc:
        # The driver's own message, without SQLAlchemy's wrapper and its link to a help page.
        raise runtime_error("cannot open the database", (setting,), describe(exc.orig or exc)) from exc
