"""With authentication on, an access line names the principal: the admitted one, and a known one refused
for its role; a caller refused as unauthenticated has no principal, and its line says why instead."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.review_cli import Cli, proposal_file

START = "/decisionflow.v1.ReviewService/StartReview"


def _access_lines(caplog: pytest.LogCaptureFixture, expected: int) -> list[logging.LogRecord]:
    # The server writes a call's access line once its status is sent, so the caller may hear the
    # answer a moment before the line exists.
    deadline = time.monotonic() + 10
    while True:
        lines = [r for r in caplog.records if r.name == "decisionflow.access" and r.__dict__["rpc"] == START]
        if len(lines) >= expected or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_access_lines_name_the_authenticated_principal(
    make_cli: Callable[..., Cli], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cli = make_cli()
    caplog.set_level(logging.INFO, logger="decisionflow.access")
    started = cli("start", str(proposal_file(tmp_path)), principal="ava")
    refused = cli("start", str(proposal_file(tmp_path)), principal=None)
    wrong_role = cli("start", str(proposal_file(tmp_path)), principal="rita")
    assert started.exit_code == 0 and refused.exit_code == 3 and wrong_role.exit_code == 3
    lines = _access_lines(caplog, 3)
    assert [(r.__dict__["code"], r.levelno, r.__dict__.get("principal")) for r in lines] == [
        ("OK", logging.INFO, "ava"),
        ("UNAUTHENTICATED", logging.WARNING, None),
        ("PERMISSION_DENIED", logging.WARNING, "rita"),
    ]
    assert lines[0].__dict__["operation_id"] == started.document["operation_id"]
    assert "reason" not in lines[0].__dict__
    assert lines[1].__dict__["reason"] == "UNAUTHENTICATED"
    assert lines[1].__dict__["detail"].startswith("credentials required")
    assert lines[2].__dict__["reason"] == "PERMISSION_DENIED"
    assert lines[2].__dict__["detail"] == f"'rita' may not call {START} (needs one of: author)"
