"""The event feed's cost bench runs end to end at a tiny size: every orchestrator answers every call, the watcher
receives every event of the watched one's reviews (and, where nats-server is installed, JetStream acknowledges every
event the relay sends of the relayed one's), each Approve's effect event reaches the watcher, the idle streams open
and receive the later reviews' events, and each figure's line is printed (no timing is asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.events_cost import EVENTS_PER_REVIEW, NATS_SERVER, PROBES, WARMUP_CALLS

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
    relay = Path(NATS_SERVER).exists()
    tables = 2 if relay else 1
    assert len(re.findall(r"^  failed calls: 0$", out, re.M)) == tables, out
    for measure in ("StartReview", "first Approve", "StartReview \\+ Approve"):
        rows = re.findall(rf"^  {measure} +(\d+\.\d+) ms +(\d+\.\d+) ms +[-+]\d+ µs +(\d+\.\d+) ", out, re.M)
        assert len(rows) == tables, out
        assert all(float(figure) > 0 for row in rows for figure in row), out
    assert re.search(r"^  idle CPU per second .*: \d+\.\d+ ms no watcher, \d+\.\d+ ms one watcher", out, re.M), out
    pace = r"^  the watched orchestrator's rounds ran at \d+ reviews/s: .* comes to [-+]\d+ µs a review$"
    assert re.search(pace, out, re.M), out
    events = EVENTS_PER_REVIEW * (WARMUP_CALLS + CALLS)
    assert f"the watcher received {events} events of the {events} " in out
    assert "each once, in index order" in out
    if relay:
        assert re.search(
            r"^  CPU per review outside the orchestrator, .*\): nats-server \d+\.\d+ ms, relay \d+\.\d+ ms$", out, re.M
        )
        assert f"JetStream acknowledged {events} of the {events} events" in out
    else:
        assert "the relay into NATS JetStream: not measured" in out
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
    assert f"streams that received all {expected} events of those reviews: {STREAMS} of {STREAMS}; refused: 0; " in out
    assert "ended while open: 0" in out
