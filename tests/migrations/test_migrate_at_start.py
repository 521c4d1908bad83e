"""``--migrate off``: a server whose database is not at the head revision refuses to start with one line
naming what it found, what it needs and the command to run (exit 2), creating nothing; after ``migrate``
it serves. Housekeeping never creates or migrates a database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from decisionflow_demo.launch import (
    CHECKPOINT_KEYS_ENV,
    ORCHESTRATOR_MODULE,
    RECEIVER_MODULE,
    orchestrator_args,
    receiver_args,
)
from decisionflow_server.foundation.processes import child_environment, spawn
from decisionflow_server.foundation.startup_errors import StartupError
from decisionflow_server.storage import db, migrating
from effect_receiver.main import SCHEMA as RECEIVER_SCHEMA
from orchestrator.main import SCHEMA as ORCHESTRATOR_SCHEMA
from tests.support.stack import CHECKPOINT_KEY

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

ENV = {CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY}


def server_args(module: str, database_url: str) -> list[str]:
    if module == ORCHESTRATOR_MODULE:
        return ["serve", *orchestrator_args(database_url, "127.0.0.1:1")]
    return ["serve", *receiver_args(database_url)]


def run(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=child_environment({**ENV, **(env or {})}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _message(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return str(json.loads(lines[0])["message"])


@pytest.mark.slow
@pytest.mark.parametrize("module", [ORCHESTRATOR_MODULE, RECEIVER_MODULE])
def test_migrate_off_refuses_an_empty_database_then_serves_once_migrated(module: str, tmp_path: Path) -> None:
    database = tmp_path / "service.db"
    url = f"sqlite:///{database}"
    program = "decisionflow-orchestrator" if module == ORCHESTRATOR_MODULE else "decisionflow-receiver"
    prefix = "ORCHESTRATOR" if module == ORCHESTRATOR_MODULE else "RECEIVER"

    refused = run(module, *server_args(module, url), "--migrate", "off")
    missing_file = database.exists()
    migrated = run(module, "migrate", "--database-url", url)
    # The environment variable says the same as the flag.
    server = spawn(
        module, server_args(module, url), tmp_path, "served", env={**ENV, f"DECISIONFLOW_{prefix}_MIGRATE": "off"}
    )
    try:
        server.wait_serving()
    finally:
        stopped = server.stop()

    assert refused.returncode == 2, refused.stderr
    message = _message(refused.stderr)
    assert message.startswith(f"{program}: the database schema is not the one this version needs (--migrate / ")
    assert f"found no database file at {database}" in message
    head = ORCHESTRATOR_SCHEMA.head if module == ORCHESTRATOR_MODULE else RECEIVER_SCHEMA.head
    assert f"needs revision {head}" in message and f"run {program} migrate" in message
    assert missing_file is False
    assert migrated.returncode == 0, migrated.stderr
    assert stopped == 0


def test_migrate_off_names_an_older_revision(tmp_path: Path) -> None:
    engine = db.create_engine(f"sqlite:///{tmp_path / 'orchestrator.db'}")
    config = db.alembic_config(ORCHESTRATOR_SCHEMA.script_location, ORCHESTRATOR_SCHEMA.version_table)
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "0001")
        with pytest.raises(StartupError) as refused:
            migrating.prepare(engine, ORCHESTRATOR_SCHEMA, auto=False)
        shown = migrating.revisions(engine, ORCHESTRATOR_SCHEMA)
    finally:
        engine.dispose()

    assert refused.value.exit_status == 2
    assert f"found revision 0001, needs revision {ORCHESTRATOR_SCHEMA.head}" in str(refused.value)
    assert (shown.current, shown.oldest_compatible, shown.newer, shown.runs_here) == ("0001", None, False, False)


def test_a_bad_migrate_mode_is_a_usage_error(tmp_path: Path) -> None:
    done = run(RECEIVER_MODULE, *server_args(RECEIVER_MODULE, str(tmp_path / "r.db")), "--migrate", "sometimes")

    assert done.returncode == 2
    assert "--migrate (env DECISIONFLOW_RECEIVER_MIGRATE): expected auto or off" in done.stderr
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("command", [["prune-checkpoints", "--older-than-days", "30"], ["reopen-reviews"]])
def test_housekeeping_on_a_mistyped_path_fails_and_creates_nothing(command: list[str], tmp_path: Path) -> None:
    typo = tmp_path / "orchestrater.db"

    done = run(ORCHESTRATOR_MODULE, *command, "--dry-run", "--database-url", str(typo))

    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    message = _message(done.stderr)
    assert f"no database at {typo}" in message and "decisionflow-orchestrator migrate" in message
    assert not typo.exists()
    assert list(tmp_path.iterdir()) == []


def test_housekeeping_on_an_empty_database_names_migrate_and_migrates_nothing(database_url: str) -> None:
    if database_url.startswith("sqlite"):
        Path(database_url.removeprefix("sqlite:///")).touch()  # an existing file with no schema

    done = run(
        ORCHESTRATOR_MODULE, "prune-checkpoints", "--older-than-days", "30", "--dry-run", "--database-url", database_url
    )
    engine = db.create_engine(database_url, pool_size=1)
    try:
        tables = sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()

    assert done.returncode == 2, done.stderr
    message = _message(done.stderr)
    assert "found no revision (an empty database)" in message and "run decisionflow-orchestrator migrate" in message
    assert tables == []
