"""The audit sequencer of a real orchestrator whose database goes away and comes back: the outage is
an expected, passing state, said once at warning with its reason (no traceback, nothing at error,
however many passes fail), and its end once at info."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.stack import Stack

SEQUENCER_LOGGER = "decisionflow.orchestrator"
REFUSED_LOGGER = "decisionflow_server.storage.transactions"


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_database_away_for_several_passes_is_one_warning_then_one_line_when_it_returns(
    make_stack: Callable[..., Stack], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "orchestrator-state"
    state.mkdir()
    away = tmp_path / "orchestrator-state-away"
    make_stack(f"sqlite:///{state / 'orchestrator.db'}", audit_interval_seconds=0.1)
    caplog.set_level(logging.INFO)

    def refused_passes() -> int:
        return sum(record.name == REFUSED_LOGGER for record in caplog.records)

    def sequencer_lines() -> list[logging.LogRecord]:
        return [record for record in caplog.records if record.name == SEQUENCER_LOGGER and "audit" in record.msg]

    state.rename(away)
    _wait_for(lambda: refused_passes() >= 5, "five passes refused by the database")
    away.rename(state)
    _wait_for(lambda: any(r.levelno == logging.INFO for r in sequencer_lines()), "the sequencer to say it resumed")

    lines = sequencer_lines()
    assert [record.levelno for record in lines] == [logging.WARNING, logging.INFO], [r.getMessage() for r in lines]
    paused, resumed = (record.getMessage() for record in lines)
    assert paused.startswith("audit log: sequencing paused, orchestrator database unavailable: the database cannot")
    assert str(tmp_path) not in paused
    assert resumed.startswith("audit log: sequencing resumed after ")
    assert all(record.exc_info is None for record in lines)
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []
