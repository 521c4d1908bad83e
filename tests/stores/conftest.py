"""The databases the store model machines run on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from orchestrator.store import migrate
from tests.support.databases import migrated_engine


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def orchestrator_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    """A migrated orchestrator database of each kind."""
    yield from migrated_engine(request, tmp_path, "orchestrator", migrate)
