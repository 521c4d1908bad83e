"""The audit history the export and verify tests share (tests.support.audit_history)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.audit_history import History, new_history
from tests.support.review_cli import Cli


@pytest.fixture
def history(make_cli: Callable[..., Cli], database_url: str, tmp_path: Path) -> History:
    """Five operations (T-1 approved, T-2 declined, T-3 pending, T-4 edited and approved) over two signed
    checkpoints, the first kept by the auditor."""
    cli = make_cli(orchestrator_url=database_url)  # no audit_log=: the store's own log is served
    history = new_history(cli, tmp_path)
    approved, declined, _pending = history.start("T-1"), history.start("T-2"), history.start("T-3")
    assert cli("approve", approved).exit_code == 0
    assert cli("decline", declined).exit_code == 0
    history.approved = approved
    first = history.checkpoint()
    history.keep(first)

    edit = tmp_path / "edit.json"
    policy = {"name": "support-replies", "version_label": "2026-10", "allowance_units": 9, "rules": {}}
    edit.write_text(json.dumps({"body": "Please update to 4.2.1.", "evidence": [], "policy": policy}))
    edited = cli("edit", history.start("T-4"), str(edit), principal="ava")
    assert edited.exit_code == 0, edited.stderr
    assert cli("approve", str(edited.document["operation_id"])).exit_code == 0
    second = history.checkpoint()
    assert second["signed"] is True and second["size"] > first["checkpoint"]["size"]
    return history
