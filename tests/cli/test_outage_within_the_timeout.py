"""The CLI outlasts an outage shorter than its --timeout: the time the user gave bounds its retries,
not a count of attempts. A real orchestrator's database goes away while `decisionflow approve
--timeout 60` runs (a separate process) and comes back after the command has been refused more times
than any fixed count allowed (5); the approval then commits."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.review_cli import Cli, proposal_file

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

REFUSED_LOGGER = "decisionflow_server.storage.transactions"
REFUSALS_BEFORE_RETURN = 7


def test_approve_retries_through_a_database_outage_until_its_timeout_and_commits(
    make_cli: Callable[..., Cli], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "orchestrator-state"
    state.mkdir()
    away = tmp_path / "orchestrator-state-away"
    cli = make_cli(orchestrator_url=f"sqlite:///{state / 'orchestrator.db'}")
    op = str(cli("start", str(proposal_file(tmp_path)), principal="ava").document["operation_id"])
    caplog.set_level(logging.WARNING, logger=REFUSED_LOGGER)

    def refusals() -> int:
        return sum(record.name == REFUSED_LOGGER for record in caplog.records)

    state.rename(away)
    command = [sys.executable, "-m", "decisionflow_cli", "approve", op, "--json", "--timeout", "60"]
    command += ["--target", cli.target, "--token-file", str(cli.tokens["rita"])]
    approving = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The outage lasts until the command has been refused more often than 5 attempts allow, or it gave up.
        deadline = time.monotonic() + 60
        while refusals() < REFUSALS_BEFORE_RETURN and approving.poll() is None:
            assert time.monotonic() < deadline, "the command was neither refused nor ended"
            time.sleep(0.05)
        away.rename(state)
        out, err = approving.communicate(timeout=90)
    finally:
        if approving.poll() is None:
            approving.kill()
            approving.wait()

    assert approving.returncode == 0, (refusals(), err)
    assert json.loads(out)["outcome"] == "COMMITTED"
    assert refusals() >= REFUSALS_BEFORE_RETURN
    assert cli.stack.effects("T-1042") == 1
