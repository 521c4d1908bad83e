"""The review rules' cost bench runs end to end at a tiny size: the release before review rules and this tree
answer every call under the default rule, the two-stage rule takes its three votes, and both tables carry each
figure (no timing is asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.rules_cost import VOTES
from decisionflow_demo.releases import RULES_MIGRATION, ReleaseNotInHistory, release_before

REPO = Path(__file__).resolve().parents[2]
CALLS = 3


@pytest.mark.slow
def test_rules_cost_bench_prints_the_default_rules_and_the_two_stages_figures() -> None:
    try:
        release_before(RULES_MIGRATION)
    except ReleaseNotInHistory as missing:
        pytest.skip(str(missing))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.rules_cost", "--rounds", "1", "--calls", str(CALLS)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("failed calls: 0") == 2, done.stdout
    for measure in ("StartReview", "first Approve", "StartReview \\+ Approve"):
        row = re.search(rf"^  {measure} +(\d+\.\d+) ms +(\d+\.\d+) ms +[-+]\d+ µs +[-+]\d+\.\d%", done.stdout, re.M)
        assert row is not None, done.stdout
        assert float(row[1]) > 0 and float(row[2]) > 0
    # The base ran on the schema before review rules, this tree on its own head.
    assert re.search(r"base: the release at [0-9a-f]{12} \(orchestrator schema 0007\)", done.stdout), done.stdout
    for vote in VOTES:
        row = re.search(rf"^  {re.escape(vote)} .*?(\d+\.\d+) ms$", done.stdout, re.M)
        assert row is not None and float(row[1]) > 0, done.stdout
    assert re.search(r"^  whole review +\d+\.\d+ ms +\d+\.\d+ ms +\d+\.\d+x the default rule", done.stdout, re.M)
