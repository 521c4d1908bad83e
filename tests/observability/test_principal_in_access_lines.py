"""With authentication on, an access line names the admitted principal; a refused caller is named by nothing."""

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
    assert started.exit_code == 0 and refused.exit_code == 3
    lines = _access_lines(caplog, 2)
    assert [(r.__dict__["code"], r.levelno, r.__dict__.get("principal")) for r in lines] == [
        ("OK", logging.INFO, "ava"),
        ("UNAUTHENTICATED", logging.WARNING, None),
    ]
    assert lines[0].__dict__["operation_id"] == started.document["operation_id"]
