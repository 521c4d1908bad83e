"""Schema revisions, explicitly: ``<program> migrate`` (and ``migrate --show``), ``--migrate auto|off`` at
start-up, and opening an existing database for housekeeping without creating or upgrading it.

- ``migrate`` applies the pending Alembic migrations and prints the revision before and after; it is
  the one command that may create a database. On PostgreSQL the upgrade holds an advisory lock
  (``decisionflow.db.migrate``), so replicas and ``migrate`` commands started together take turns.
- ``migrate --show`` prints the current and the head revision and changes nothing: a missing SQLite
  file is reported as missing, never created.
- A server under ``--migrate auto`` (the default) migrates at start; under ``off`` it refuses to start
  (exit 2, one line naming the revision found, the one needed and the command to run) unless the
  database is already at the head revision.
- Housekeeping opens the database with ``open_existing``: a missing SQLite file or a schema that is not
  at the head revision is a configuration error (exit 2), and nothing is created.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Engine

from decisionflow import arguments, db, startup
from decisionflow.settings import Setting, SettingError, add_settings, parse_settings
from decisionflow.startup import StartupError


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
    def head(self) -> str:
        """The newest revision this version of the service ships."""
        config = db.alembic_config(self.script_location, self.version_table)
        head = ScriptDirectory.from_config(config).get_current_head()
        assert head is not None, "a service ships at least one migration"
        return head


@dataclass(frozen=True, slots=True)
class Revisions:
    """The revision a database is at (None: none recorded) and the one the service needs."""

    current: str | None
    head: str

    @property
    def at_head(self) -> bool:
        """True when the database has exactly the schema the service needs."""
        return self.current == self.head


def sqlite_file(engine: Engine) -> Path | None:
    """Return the file behind a SQLite engine, None for another database or one held in memory."""
    database = engine.url.database
    if not db.is_sqlite(engine) or not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _missing_file(engine: Engine) -> Path | None:
    path = sqlite_file(engine)
    return path if path is not None and not path.exists() else None


def revisions(engine: Engine, schema: Schema) -> Revisions:
    """Return where the database behind engine stands; a missing SQLite file is not created."""
    if _missing_file(engine) is not None:
        return Revisions(None, schema.head)
    with db.reading(engine) as connection:
        return Revisions(db.current_revision(connection, schema.version_table), schema.head)


def _found(current: Revisions, engine: Engine) -> str:
    missing = _missing_file(engine)
    if missing is not None:
        return f"no database file at {missing}"
    return f"revision {current.current}" if current.current else "no revision (an empty database)"


def require_head(engine: Engine, schema: Schema, settings: Sequence[Setting[Any]]) -> None:
    """Raise a configuration StartupError naming settings unless the database is at the head revision."""
    current = revisions(engine, schema)
    if not current.at_head:
        raise startup.configuration_error(
            "the database schema is not the one this version needs",
            settings,
            f"found {_found(current, engine)}, needs revision {current.head}; run {schema.program} migrate "
            "with the same database settings",
        )


def prepare(engine: Engine, schema: Schema, *, auto: bool) -> None:
    """At a server's start: migrate to the head revision (auto), or refuse to start unless it is there (off)."""
    if auto:
        db.migrate(engine, schema.script_location, schema.version_table)
        return
    require_head(engine, schema, (schema.migrate, schema.database_url))


def open_existing(url: str, schema: Schema) -> Engine:
    """Return an engine on an existing database at the head revision, creating and migrating nothing; a
    missing SQLite file or an older schema raises a configuration StartupError, an unreachable database a
    runtime one."""
    settings: tuple[Setting[str], ...] = (schema.database_url, schema.database_url_file)
    engine = startup.database_engine(url, schema.database_url)
    try:
        missing = _missing_file(engine)
        if missing is not None:
            # Connecting would create the file: a mistyped path must leave nothing behind.
            raise startup.configuration_error(
                f"no database at {missing}", settings, f"no such file; {schema.program} migrate creates a database"
            )
        with startup.opening_database(schema.database_url):
            require_head(engine, schema, settings)
    except BaseException:
        engine.dispose()
        raise
    return engine


def migrate_command(
    schema: Schema, argv: Sequence[str], configure_logging: Callable[[str], None], logger: logging.Logger
) -> int:
    """Run ``<program> migrate [--show]``: print one JSON line on stdout and a summary on stderr; return the
    exit status (0 done, 2 bad settings, 1 database unreachable or failing)."""
    prog = f"{schema.program} migrate"
    cli = arguments.ArgumentParser(
        prog=prog,
        description="Apply the pending schema migrations and print the revision before and after (creates the "
        "database if it does not exist). With --show, print the current and the head revision and change nothing.",
    )
    settings = (schema.database_url, schema.database_url_file, schema.log_level)
    add_settings(cli, settings)
    cli.add_argument("--show", action="store_true", help="print the current and the head revision; change nothing")
    ns = cli.parse_args(list(argv))
    try:
        values = parse_settings(ns, settings, os.environ)
        url = values.required_one_of(schema.database_url, schema.database_url_file)
    except SettingError as error:
        cli.error(str(error))
    level = values.required(schema.log_level)
    configure_logging(level)
    try:
        engine = startup.database_engine(url, schema.database_url)
        try:
            with startup.opening_database(schema.database_url):
                if ns.show:
                    current = revisions(engine, schema)
                    document: dict[str, object] = {
                        "command": "migrate",
                        "show": True,
                        "current": current.current,
                        "head": current.head,
                        "at_head": current.at_head,
                    }
                    summary = f"{_found(current, engine)}; head is {current.head}" + (
                        "" if current.at_head else f"; run {prog} to upgrade"
                    )
                else:
                    before, after = db.migrate(engine, schema.script_location, schema.version_table)
                    document = {"command": "migrate", "show": False, "before": before, "after": after}
                    summary = (
                        f"already at revision {after}"
                        if before == after
                        else f"migrated from {before or 'an empty database'} to revision {after}"
                    )
        except CommandError as exc:
            # The recorded revision is none of ours: a newer version migrated this database.
            raise startup.runtime_error("cannot migrate", (schema.database_url,), startup.describe(exc)) from exc
        finally:
            engine.dispose()
    except StartupError as error:
        return startup.report(prog, error, logger, debug=level == "debug", service=schema.service)
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stderr.write(f"{prog}: {summary}\n")
    return 0
