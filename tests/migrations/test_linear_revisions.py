"""The plain reading of the migration files a server's start uses to find the head
(decisionflow_server.storage.migrating.linear_revisions) agrees with Alembic on both services' migrations, and
hands back to Alembic whatever it cannot tell for certain."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from decisionflow_server.storage import migrating
from effect_receiver.main import SCHEMA as RECEIVER_SCHEMA
from orchestrator.main import SCHEMA as ORCHESTRATOR_SCHEMA

SCHEMAS = {schema.service: schema for schema in (ORCHESTRATOR_SCHEMA, RECEIVER_SCHEMA)}


@pytest.mark.parametrize("service", sorted(SCHEMAS))
def test_the_plain_reading_is_alembics_chain(service: str) -> None:
    schema = SCHEMAS[service]
    alembic_chain = tuple(reversed([script.revision for script in schema.scripts.walk_revisions()]))

    assert migrating.linear_revisions(schema.script_location) == alembic_chain
    assert alembic_chain[-1] == schema.head


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "migrations"
    shutil.copytree(RECEIVER_SCHEMA.script_location, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


MIGRATION = '"""A migration."""\n\n{declarations}\n\n\ndef upgrade() -> None:\n    """Apply this revision."""\n'


@pytest.mark.parametrize(
    "declarations",
    [
        # a second branch from the first migration
        'revision = "0003"\ndown_revision = "0001"',
        # a merge of two heads
        'revision = "0003"\ndown_revision = ("0001", "0002")',
        # a revision computed, not written
        'revision = "00" + "03"\ndown_revision = "0002"',
        # a parent that no migration is
        'revision = "0003"\ndown_revision = "0000"',
    ],
    ids=["branch", "merge", "computed", "orphan"],
)
def test_what_the_plain_reading_cannot_tell_is_left_to_alembic(tmp_path: Path, declarations: str) -> None:
    copy = _copy(tmp_path)
    assert migrating.linear_revisions(copy) == ("0001", "0002")

    (copy / "versions" / "0003_planted.py").write_text(MIGRATION.format(declarations=declarations))

    assert migrating.linear_revisions(copy) is None


def test_a_file_alembic_skips_is_skipped(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    (copy / "versions" / ".#0003_planted.py").write_text(MIGRATION.format(declarations='revision = "0003"'))
    (copy / "versions" / "notes.txt").write_text('revision = "0004"\n')

    assert migrating.linear_revisions(copy) == ("0001", "0002")
