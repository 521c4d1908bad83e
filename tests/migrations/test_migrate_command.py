"""``<service> migrate`` and ``migrate --show`` as the operator runs them, on a fresh SQLite file and a fresh
PostgreSQL database; replicas migrating one database at once take turns."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from decisionflow_server.foundation.processes import child_environment
from decisionflow_server.storage import db, migrating
from effect_receiver.main import SCHEMA as RECEIVER_SCHEMA
from orchestrator.main import SCHEMA as ORCHESTRATOR_SCHEMA

SERVICES = {"orchestrator.main": ORCHESTRATOR_SCHEMA, "effect_receiver.main": RECEIVER_SCHEMA}


def migrate(module: str, database_url: str, *args: str) -> tuple[int, dict[str, object], str]:
    """Run ``python -m module migrate ARGS``; return its exit status, its JSON line and its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", module, "migrate", "--database-url", database_url, *args],
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout else {}, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(SERVICES))
def test_migrate_upgrades_a_fresh_database_and_show_changes_nothing(module: str, database_url: str) -> None:
    head = SERVICES[module].head
    sqlite_file = Path(database_url.removeprefix("sqlite:///")) if database_url.startswith("sqlite") else None

    shown_before = migrate(module, database_url, "--show")
    first = migrate(module, database_url)
    again = migrate(module, database_url)
    shown_after = migrate(module, database_url, "--show")

    assert shown_before[0] == 0, shown_before[2]
    assert shown_before[1] == {
        "command": "migrate",
        "show": True,
        "current": None,
        "head": head,
        "at_head": False,
        "oldest_compatible": None,
        "compatible": False,
    }
    if sqlite_file is not None:
        assert "no database file at" in shown_before[2]
    assert first[0] == 0, first[2]
    assert first[1] == {"command": "migrate", "show": False, "before": None, "after": head}
    assert f"migrated from an empty database to revision {head}" in first[2]
    assert again[0] == 0 and again[1] == {"command": "migrate", "show": False, "before": head, "after": head}
    assert f"already at revision {head}" in again[2]
    assert shown_after[1] == {
        "command": "migrate",
        "show": True,
        "current": head,
        "head": head,
        "at_head": True,
        "oldest_compatible": SERVICES[module].scripts.get_revision(head).module.compatibility.oldest,
        "compatible": True,
    }


def test_show_on_a_missing_sqlite_file_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "orchestrator.db"

    code, document, _ = migrate("orchestrator.main", str(missing), "--show")

    assert code == 0 and document["current"] is None and document["at_head"] is False
    assert not missing.exists() and not missing.parent.exists()


def test_migrate_with_a_bad_database_url_exits_2_with_one_line(tmp_path: Path) -> None:
    code, document, stderr = migrate("effect_receiver.main", "nosuchdriver://x/y")

    assert code == 2 and document == {}
    assert len(stderr.strip().splitlines()) == 1 and "cannot use the database URL" in stderr


@pytest.mark.parametrize("schema", [ORCHESTRATOR_SCHEMA, RECEIVER_SCHEMA], ids=["orchestrator", "receiver"])
def test_replicas_migrating_one_database_at_once_take_turns(schema: migrating.Schema, database_url: str) -> None:
    engines = [db.create_engine(database_url, pool_size=1) for _ in range(4)]
    results: list[tuple[str | None, str | None]] = []
    failures: list[BaseException] = []
    start = threading.Barrier(len(engines))

    def run(engine: Engine) -> None:
        try:
            start.wait()
            results.append(db.migrate(engine, schema.script_location, schema.version_table))
        except Exception as exc:  # reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(engine,)) for engine in engines]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert failures == []
        # Exactly one found the database empty and migrated it; the others found it done.
        assert sorted(results, key=str) == sorted([(None, schema.head)] + [(schema.head, schema.head)] * 3, key=str)
        assert migrating.revisions(engines[0], schema).at_head
    finally:
        for engine in engines:
            engine.dispose()
