"""The SQLite write turn orders writers across the processes of one file, not only across threads."""

from __future__ import annotations

import os
import time
from pathlib import Path

from decisionflow_server.storage import db


def _note(path: Path, text: str) -> None:
    with path.open("a") as notes:
        notes.write(text + "\n")


def _wait_for(path: Path, text: str) -> None:
    deadline = time.monotonic() + 10
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} never written"
        time.sleep(0.01)


def test_a_forked_worker_and_its_parent_take_turns(tmp_path: Path) -> None:
    database = tmp_path / "service.db"
    notes = tmp_path / "notes"
    turn = db.WriteTurn(str(database))
    with turn:  # opened in the parent before the fork, as a service's parent may
        pass
    child = os.fork()
    if child == 0:  # the worker: holds the turn a while
        try:
            with turn:
                _note(notes, "worker in")
                time.sleep(0.5)
                _note(notes, "worker out")
        finally:
            os._exit(0)
    _wait_for(notes, "worker in")
    with turn:
        _note(notes, "parent in")
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert notes.read_text().splitlines() == ["worker in", "worker out", "parent in"]
    assert (tmp_path / "service.db-turn").exists()


def test_a_turn_that_cannot_open_its_file_still_serves(tmp_path: Path) -> None:
    turn = db.WriteTurn(str(tmp_path / "missing-directory" / "service.db"))
    with turn:
        pass
    with turn:  # the thread lock was released: taken again
        pass
    assert not (tmp_path / "missing-directory").exists()
