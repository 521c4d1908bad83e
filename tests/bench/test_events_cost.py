"""The event feed's cost bench runs end to end at a tiny size: both orchestrators answer every call, the watcher
receives every event of the watched one's reviews, each Approve's effect event reaches it, the idle streams open
and receive the later reviews' events, and each figure's line is printed (no timing is asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.events_cost import EVENTS_PER_REVIEW, PROBES, WARMUP_CALLS

REPO = Path(__file__).resolve().parents[2]
CALLS = 3
LATENCY_CALLS = 4
STREAMS = 3


@pytest.mark.slow
def test_events_cost_bench_prints_the_cost_latency_and_idle_stream_figures() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.events_cost",
            "--rounds",
            "1",
            "--calls",
            str(CALLS),
            "--latency-calls",
            str(LATENCY_CALLS),
            "--streams",
            str(STREAMS),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:] + out
    assert "failed calls: 0" in out
    for measure in ("StartReview", "first Approve", "StartReview \\+ Approve"):
        row = re.search(rf"^  {measure} +(\d+\.\d+) ms +(\d+\.\d+) ms +[-+]\d+ µs +(\d+\.\d+) ", out, re.M)
        assert row is not None, out
        assert float(row[1]) > 0 and float(row[2]) > 0 and float(row[3]) > 0
    assert re.search(r"^  idle CPU per second .*: \d+\.\d+ ms no watcher, \d+\.\d+ ms one watcher", out, re.M), out
    events = EVENTS_PER_REVIEW * (WARMUP_CALLS + CALLS)
    assert f"the watcher received {events} events of the {events} " in out
    assert "each once, in index order" in out
    assert re.search(r"^  sequencing the unwatched orchestrator's \d+ entries .*: \d+ µs a leaf", out, re.M), out
    latency = re.search(r"^  count (\d+), p50 -?\d+\.\d ms, p99 -?\d+\.\d ms, largest -?\d+\.\d ms", out, re.M)
    assert latency is not None and int(latency[1]) == LATENCY_CALLS, out
    assert "0 never arrived" in out
    assert re.search(
        r"^  RSS \d+\.\d MiB before, \d+\.\d MiB with the streams open: [-+]\d+\.\d KiB per stream", out, re.M
    )
    assert re.search(r"^  CPU per second idle: \d+\.\d+ ms before, \d+\.\d+ ms with the streams open", out, re.M), out
    assert re.search(r"^  an Approve answered in \d+\.\d ms with the streams open", out, re.M), out
    expected = EVENTS_PER_REVIEW * PROBES
    assert f"streams that received all {expected} events of those reviews: {STREAMS} of {STREAMS}; refused: 0" in out
