"""What a failing campaign shows (tests.support.campaigns.on_failure): the notes a test asked for appear
under their heading in the report of a test that fails, and in no other; a fixture's teardown can tell
which it was, to keep what explains the failure (the failover campaign keeps its cluster's logs so)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INNER = """
import pytest
from pathlib import Path
from tests.support.campaigns import failed, on_failure

@pytest.fixture
def cluster(request):
    on_failure(request, "the nodes' logs", lambda: f"log tail for {request.node.name}")
    yield
    (Path(KEPT) / request.node.name).write_text(str(failed(request)))

def test_fails(cluster):
    assert False

def test_passes(cluster):
    pass
"""


def test_a_failing_test_shows_its_notes_and_its_fixture_knows_it_failed(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    inner = tmp_path / "test_inner.py"
    inner.write_text(INNER.replace("KEPT", repr(str(kept))), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.support.campaigns", str(inner)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the nodes' logs" in done.stdout
    assert "log tail for test_fails" in done.stdout
    assert "log tail for test_passes" not in done.stdout
    assert (kept / "test_fails").read_text() == "True"
    assert (kept / "test_passes").read_text() == "False"
