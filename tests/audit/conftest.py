"""The audit history the export and verify tests share (tests.support.audit_history): built once per
worker and kind of database, and copied for each test, which may tamper with its copy."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.audit_history import History, HistoryImages
from tests.support.review_cli import Cli


def build_history(cli: Cli, history: History) -> None:
    """Five operations (T-1 approved, T-2 declined, T-3 pending, T-4 edited and approved) over two signed
    checkpoints, the first kept by the auditor."""
    approved, declined, _pending = history.start("T-1"), history.start("T-2"), history.start("T-3")
    assert cli("approve", approved).exit_code == 0
    assert cli("decline", declined).exit_code == 0
    history.approved = approved
    first = history.checkpoint()
    history.keep(first)

    edit = history.directory / "edit.json"
    policy = {"name": "support-replies", "version_label": "2026-10", "allowance_units": 9, "rules": {}}
    edit.write_text(json.dumps({"body": "Please update to 4.2.1.", "evidence": [], "policy": policy}))
    edited = cli("edit", history.start("T-4"), str(edit), principal="ava")
    assert edited.exit_code == 0, edited.stderr
    assert cli("approve", str(edited.document["operation_id"])).exit_code == 0
    second = history.checkpoint()
    assert second["signed"] is True and second["size"] > first["checkpoint"]["size"]


@pytest.fixture(scope="session")
def history_images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HistoryImages]:
    """The histories this worker built, kept stopped, each copied for every test that asks for it."""
    images = HistoryImages(tmp_path_factory)
    yield images
    images.drop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_kind(request: pytest.FixtureRequest) -> str:
    """Each kind of database the orchestrator runs on."""
    return str(request.param)


@pytest.fixture
def history(
    history_images: HistoryImages,
    database_kind: str,
    make_cli: Callable[..., Cli],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> Iterator[History]:
    """build_history's history, on a copy of its databases of database_kind served by a fresh stack."""
    image = history_images.get("history", database_kind, capsys, build_history)
    with image.copy(make_cli, tmp_path) as history:
        yield history
