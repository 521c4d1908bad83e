"""The benchmark runs end to end at a tiny size and writes its JSON document (no timing is asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench._report import CPU_OF

REPO = Path(__file__).resolve().parents[2]
HEADLINES = (
    "baseline_chain_rps",
    "receiver_apply_rps",
    "start_review_rps",
    "approve_first_rps",
    "approve_replay_rps",
    "reconcile_settle_rps",
    "identity_us",
    "approve_first_p99_ms",
    "inprocess_framework_jobs_rps",
    "inprocess_framework_cpu_ms",
)
MEASURES = (
    "baseline_chain",
    "receiver_apply",
    "receiver_apply_replay",
    "start_review",
    "approve_first",
    "approve_replay",
    "review_in_turn",
)
PER_CONCURRENCY = {f"{m}_{kind}_c{c}" for m in MEASURES for kind in ("rps", "p50_ms", "p99_ms") for c in (1, 16, 64)}


@pytest.mark.slow
def test_quick_bench_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "latest.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    env["BENCH_OUT"] = str(out)
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--rounds", "1", "--calls", "3", "--backlog", "20"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "QUICK" in done.stdout and "MET" in done.stdout

    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["quick"] is True
    assert document["database"] == "sqlite"
    assert document["failed_calls"] == {}
    assert {"cpu", "cores", "load_average_before"} <= document["machine"].keys()
    figures = document["figures"]
    expected = set(HEADLINES) | PER_CONCURRENCY
    assert expected <= figures.keys(), sorted(expected - figures.keys())
    # Every figure at each worker count, with the CPU of the processes that served it.
    cpu = {f"{m}_cpu_ms_{s}_c{c}" for m, services in CPU_OF.items() for s in services for c in (1, 16, 64)}
    for workers in (1, 2):
        suffixed = {f"{name}_w{workers}" for name in expected | cpu}
        assert suffixed <= figures.keys(), sorted(suffixed - figures.keys())
    assert document["workers"] == [1, 2]
    for name, figure in figures.items():
        assert set(figure) == {"value", "unit", "ratio"}, name
        # CPU is read to the nanosecond (bench._cpu), but in clock ticks where a process's CPU clock cannot be
        # read: a few calls may then take less than one.
        least = 0 if "_cpu_ms_" in name else 1e-9
        assert isinstance(figure["value"], int | float) and figure["value"] >= least, name
        assert isinstance(figure["unit"], str) and figure["unit"], name
        assert figure["ratio"] is None or figure["ratio"] > 0, name
    assert figures["approve_first_rps_c64"]["ratio"] is not None
    assert figures["identity_us"]["ratio"] is None
    assert figures["inprocess_framework_jobs_rps"]["ratio"] is None
    assert "in process, no network (Agent Framework alone" in done.stdout
    assert figures["reconcile_settled"]["value"] == 20
    assert {t["figure"] for t in document["targets"]} == {
        f"{name}_w{workers}"
        for name in (
            "approve_replay_rps",
            "approve_first_rps",
            "approve_first_p99_ms",
            "approve_first_p50_ms_c1",
            "start_review_rps",
            "reconcile_settle_rps",
            "identity_us",
        )
        for workers in (1, 2)
    }
    assert "2 worker process(es) per service" in done.stdout
