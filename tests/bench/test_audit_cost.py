"""The audit log's cost bench runs end to end at a tiny size: both orchestrators answer every call, the real one
writes a leaf per event and the baseline none, and the table carries each figure (no timing is asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.audit_cost import MEASURES, WARMUP_CALLS, WITH, WITHOUT, Tally, render

REPO = Path(__file__).resolve().parents[2]
CALLS = 3


@pytest.mark.slow
def test_audit_cost_bench_prints_both_orchestrators_figures() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.audit_cost", "--rounds", "1", "--calls", str(CALLS)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "failed calls: 0" in done.stdout
    for measure in ("StartReview", "first Approve"):
        row = re.search(rf"^  {measure} +(\d+\.\d+) ms +(\d+\.\d+) ms +-?\d+ µs +-?\d+\.\d%", done.stdout, re.M)
        assert row is not None, done.stdout
        assert float(row[1]) > 0 and float(row[2]) > 0
    # A started review, its decision and its effect: three leaves per review through the real orchestrator.
    reviews = WARMUP_CALLS + CALLS
    assert f"audit entries written: {3 * reviews} with leaves, 0 without leaves" in done.stdout


def test_a_round_that_measured_no_cpu_is_named_not_divided() -> None:
    # Where CPU can only be read in 10 ms ticks, three calls can read as none, in one orchestrator or in both.
    idle, busy = Tally(), Tally()
    for measure in MEASURES:
        idle.per_round[measure].append(0.0)
        busy.per_round[measure].append(0.0)
    busy.cpu_seconds["first Approve"], busy.calls["first Approve"] = 0.01, 3
    busy.per_round["first Approve"] = [10 / 3]

    table = render({WITH: idle, WITHOUT: busy}, "sqlite", 1, 3)

    assert table.count("none: no round measured the orchestrator's CPU") == 2, table
    assert "failed calls: 0" in table
