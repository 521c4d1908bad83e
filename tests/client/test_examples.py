"""examples/approve_async.py against real services: a retry through a lost reply, a stale tab."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.client_examples import ExampleServices, check_story

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "approve_async.py"


@pytest.mark.slow
def test_the_async_example_approves_once_through_a_lost_reply_and_meets_a_stale_tab(
    example_services: ExampleServices,
) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), example_services.target],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    check_story(done.stdout, example_services)
