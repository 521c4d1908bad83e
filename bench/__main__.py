"""Command line of the benchmark: run it, print the table, write the JSON document."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from bench import _profile, _report, _run

DEFAULT_OUT = Path(__file__).resolve().parent / "out" / "latest.json"


def _progress(message: str) -> None:
    sys.stderr.write(f"bench: {message}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark once; print the table and write the JSON document (BENCH_OUT or bench/out/latest.json)."""
    cli = argparse.ArgumentParser(
        prog="python -m bench",
        description="Throughput, latency, reconciler speed, identity cost and memory of decisionflow, "
        "each throughput compared with a bare two-hop gRPC chain measured in interleaved rounds.",
    )
    cli.add_argument("--quick", action="store_true", help="fewer calls, fewer rounds, smaller backlog (under a minute)")
    cli.add_argument("--postgres-url", help="run both services on fresh PostgreSQL databases made next to this one")
    cli.add_argument("--rounds", type=int, help="interleaved rounds (default: 3, quick: 2)")
    cli.add_argument("--calls", type=int, help="calls per measurement per round at every concurrency")
    cli.add_argument("--backlog", type=int, help="Unknowns for the reconciler to settle (default: 10000, quick: 400)")
    cli.add_argument(
        "--workers",
        default="1,2",
        help="comma-separated worker counts; everything is measured at each (default: 1,2)",
    )
    cli.add_argument("--workdir", type=Path, help="keep databases and server logs here (default: a temporary dir)")
    cli.add_argument("--out", type=Path, help="JSON output path (default: $BENCH_OUT or bench/out/latest.json)")
    cli.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="after the measured rounds, sample the orchestrator (first and replayed Approve) and the receiver "
        "with py-spy at 16 in flight and write the top functions to DIR (needs py-spy: pip install py-spy)",
    )
    ns = cli.parse_args(argv)
    profiler = None
    if ns.profile is not None:
        py_spy = _profile.find_py_spy()
        if py_spy is None:
            cli.error("--profile needs py-spy in this environment: .venv/bin/pip install py-spy")
        profiler = _profile.Profiler(ns.profile, py_spy)
    plan = _run.QUICK if ns.quick else _run.FULL
    if ns.rounds is not None:
        plan = replace(plan, rounds=max(1, ns.rounds))
    if ns.calls is not None:
        plan = replace(plan, calls={c: max(1, ns.calls) for c in _run.CONCURRENCIES})
    if ns.backlog is not None:
        plan = replace(plan, backlog=max(1, ns.backlog))
    try:
        worker_counts = tuple(int(w) for w in ns.workers.split(",") if w.strip())
    except ValueError:
        cli.error(f"--workers: expected comma-separated whole numbers, not {ns.workers!r}")
    if not worker_counts or min(worker_counts) < 1:
        cli.error("--workers: give at least one count of 1 or more")
    plan = replace(plan, workers=worker_counts)
    out = ns.out or Path(os.environ.get("BENCH_OUT") or DEFAULT_OUT)

    load_before = os.getloadavg()
    results = _run.run(plan, ns.postgres_url, ns.workdir, _progress, profiler)
    machine = _report.machine(load_before, os.getloadavg())
    figures = _report.figures(results)
    print(_report.render(results, figures, machine))
    document = _report.document(results, figures, machine)
    _report.write_json(out, document, lambda d: json.dumps(d, indent=2, ensure_ascii=False))
    _progress(f"wrote {out}")
    if profiler is not None:
        _progress(f"profiles in {profiler.directory}: *.top.txt (py-spy, GIL-held samples)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
