"""Figures, targets, the printed table and the JSON document of one run."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import _costs, _reconcile
from bench._run import (
    APPLY_CREATED,
    APPLY_REPLAYED,
    APPROVE_FIRST,
    APPROVE_REPLAY,
    BASELINE,
    CONCURRENCIES,
    MEASURES,
    REVIEW_IN_TURN,
    START_REVIEW,
    Results,
)

HEADLINE_IN_FLIGHT = 16

_TITLES = {
    BASELINE: "baseline: bare gRPC chain client → A → B",
    APPLY_CREATED: "receiver Apply, created",
    APPLY_REPLAYED: "receiver Apply, replayed",
    START_REVIEW: "StartReview",
    APPROVE_FIRST: "first Approve (decision, resume, receiver write)",
    APPROVE_REPLAY: "replayed Approve",
    REVIEW_IN_TURN: "review in turn (StartReview, then its first Approve)",
}


@dataclass(frozen=True, slots=True)
class Figure:
    """One reported number: its value, unit, and its ratio to the baseline at the same concurrency (or None)."""

    value: float
    unit: str
    ratio: float | None

    def as_json(self) -> dict[str, Any]:
        """Return the JSON form of the figure."""
        return {
            "value": round(self.value, 3),
            "unit": self.unit,
            "ratio": None if self.ratio is None else round(self.ratio, 3),
        }


@dataclass(frozen=True, slots=True)
class Target:
    """A goal for one figure on this machine: value (or ratio, when of_baseline) compared with limit."""

    figure: str
    at_least: bool
    limit: float
    of_baseline: bool = False

    def describe(self) -> str:
        """Return the goal as text, e.g. ``approve_first_rps ≥ 0.3 x baseline``."""
        sign = "≥" if self.at_least else "≤"
        limit = f"{self.limit:g} x baseline" if self.of_baseline else f"{self.limit:,g}"
        return f"{self.figure} {sign} {limit}"

    def met(self, figures: dict[str, Figure]) -> bool:
        """True when the figure meets the goal."""
        figure = figures[self.figure]
        value = figure.ratio if self.of_baseline else figure.value
        if value is None:
            return False
        return value >= self.limit if self.at_least else value <= self.limit


# The targets at 16 in flight on SQLite, for every worker count; a suffix _w<N> names the run.
TARGETS = (
    Target("approve_first_rps", at_least=True, limit=0.2, of_baseline=True),
    Target("approve_first_p99_ms", at_least=False, limit=150),
    Target("approve_first_p50_ms_c1", at_least=False, limit=8),
    Target("start_review_rps", at_least=True, limit=0.25, of_baseline=True),
    Target("approve_replay_rps", at_least=True, limit=0.8, of_baseline=True),
    Target("reconcile_settle_rps", at_least=True, limit=2000),
    Target("identity_us", at_least=False, limit=5),
)
# On PostgreSQL, with two orchestrator workers.
POSTGRES_TARGETS = (Target("approve_first_rps_w2", at_least=True, limit=150),)

# Whose CPU each measurement's figure shows: the processes that serve it.
CPU_OF = {
    BASELINE: ("baseline_a", "baseline_b"),
    APPLY_CREATED: ("receiver",),
    APPLY_REPLAYED: ("receiver",),
    START_REVIEW: ("orchestrator",),
    APPROVE_FIRST: ("orchestrator", "receiver"),
    APPROVE_REPLAY: ("orchestrator", "receiver"),
    REVIEW_IN_TURN: ("orchestrator", "receiver"),
}


def _run_figures(results: Results) -> dict[str, Figure]:
    """Every named figure of one run; headline names are the figures at 16 calls in flight."""
    out: dict[str, Figure] = {}
    for in_flight in CONCURRENCIES:
        baseline_rps = results.of(BASELINE, in_flight).rps
        for measure in MEASURES:
            series = results.of(measure, in_flight)
            ratio = series.rps / baseline_rps if baseline_rps > 0 else None
            per_level = {
                f"{measure}_rps": Figure(series.rps, "calls/s", ratio),
                f"{measure}_p50_ms": Figure(series.latency_ms(0.50), "ms", None),
                f"{measure}_p99_ms": Figure(series.latency_ms(0.99), "ms", None),
            }
            for service in CPU_OF[measure]:
                cpu = results.cpu_ms_per_call(measure, in_flight, service)
                per_level[f"{measure}_cpu_ms_{service}"] = Figure(cpu, "CPU ms per call", None)
            for name, figure in per_level.items():
                out[f"{name}_c{in_flight}"] = figure
                if in_flight == HEADLINE_IN_FLIGHT:
                    out[name] = figure
    reconcile = results.reconcile
    if reconcile is not None:
        out["reconcile_settle_rps"] = Figure(reconcile.settle_rps, "operations/s", None)
        out["reconcile_backlog"] = Figure(reconcile.backlog, "operations", None)
        out["reconcile_settled"] = Figure(reconcile.settled, "operations", None)
        out["reconcile_pass_s"] = Figure(reconcile.pass_seconds, "s", None)
        out["reconcile_wall_s"] = Figure(reconcile.wall_seconds, "s", None)
    if results.inprocess is not None:
        out["inprocess_framework_jobs_rps"] = Figure(results.inprocess.jobs_per_second, "jobs/s", None)
        out["inprocess_framework_cpu_ms"] = Figure(results.inprocess.cpu_ms_per_job, "CPU ms per job", None)
    for cost in _costs.costs(results):
        if cost.ratio:  # a run that measured no CPU (read in ticks where the CPU clock is absent) has no ratio
            out[f"cost_{cost.name}"] = Figure(cost.ratio, "ratio", None)
    out["identity_us"] = Figure(results.identity_us, "µs", None)
    out["identities_all_us"] = Figure(results.identities_us, "µs", None)
    for name, kib in results.rss_kib.items():
        out[f"rss_{name}_mib"] = Figure(kib / 1024, "MiB", None)
    return out


def figures(runs: list[Results]) -> dict[str, Figure]:
    """Every figure of every run, named with the suffix _w<workers>; the first run's also without it."""
    out: dict[str, Figure] = {}
    for index, results in enumerate(runs):
        for name, figure in _run_figures(results).items():
            out[f"{name}_w{results.workers}"] = figure
            if index == 0:
                out[name] = figure
    return out


def targets(runs: list[Results]) -> list[Target]:
    """The targets that apply to these runs: each per-run target for every worker count, and PostgreSQL's."""
    applied = [replace(t, figure=f"{t.figure}_w{r.workers}") for r in runs for t in TARGETS]
    if runs and runs[0].database == "postgresql":
        applied += list(POSTGRES_TARGETS)
    return applied


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(load_before: tuple[float, float, float], load_after: tuple[float, float, float]) -> dict[str, Any]:
    """Return a description of the machine and its load average before and after the run."""
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
    }


def document(runs: list[Results], table: dict[str, Figure], machine_info: dict[str, Any]) -> dict[str, Any]:
    """Return the JSON document of the runs."""
    plan = runs[0].plan
    failures = {
        f"{measure}_c{in_flight}_w{r.workers}": r.of(measure, in_flight).failures
        for r in runs
        for measure in MEASURES
        for in_flight in CONCURRENCIES
        if r.of(measure, in_flight).failures
    }
    return {
        "figures": {name: figure.as_json() for name, figure in table.items()},
        "machine": machine_info,
        "database": runs[0].database,
        "workers": [r.workers for r in runs],
        "quick": plan.quick,
        "targets": [
            {"target": t.describe(), "figure": t.figure, "met": t.met(table)}
            for t in targets(runs)
            if t.figure in table
        ],
        "plan": {
            "rounds": plan.rounds,
            "calls_per_measurement_per_round": {str(k): v for k, v in plan.calls.items()},
            "reconcile_backlog": plan.backlog,
            "reconcile_seed": _reconcile.SEED_METHOD,
            "baseline": "median of its rounds, each taken just before the real round at the same concurrency, "
            "with as many processes per hop as the services have workers",
            "cpu": "user+system CPU in nanoseconds from the CPU-time clock of each service's processes (parent "
            "and workers; bench._cpu), over the measurement, per completed call",
        },
        "failed_calls": failures,
        "reconciler_summary": {str(r.workers): None if r.reconcile is None else r.reconcile.summary for r in runs},
        "seconds": round(sum(r.seconds for r in runs), 1),
    }


def _row(label: str, cells: list[str]) -> str:
    return f"{label:<50}" + "".join(f"{c:>38}" for c in cells)


def _cpu_cell(table: dict[str, Figure], measure: str, in_flight: int, suffix: str) -> str:
    parts = [table[f"{measure}_cpu_ms_{service}_c{in_flight}{suffix}"].value for service in CPU_OF[measure]]
    return "+".join(f"{p:.1f}" for p in parts)


def _render_run(results: Results, table: dict[str, Figure]) -> list[str]:
    suffix = f"_w{results.workers}"
    lines = [
        f"--- {results.workers} worker process(es) per service and per baseline hop "
        f"(ratios against the baseline with as many) ---",
        _row("calls/s (xbaseline) p50/p99 ms [CPU ms/call]", [f"{c} in flight" for c in CONCURRENCIES]),
    ]
    for measure in MEASURES:
        cells = []
        for in_flight in CONCURRENCIES:
            rps = table[f"{measure}_rps_c{in_flight}{suffix}"]
            p50 = table[f"{measure}_p50_ms_c{in_flight}{suffix}"].value
            p99 = table[f"{measure}_p99_ms_c{in_flight}{suffix}"].value
            ratio = "" if rps.ratio is None or measure == BASELINE else f" ({rps.ratio:.2f}x)"
            cpu = _cpu_cell(table, measure, in_flight, suffix)
            cells.append(f"{rps.value:,.0f}{ratio} {p50:.1f}/{p99:.1f} [{cpu}]")
        failed = sum(results.of(measure, c).failures for c in CONCURRENCIES)
        label = _TITLES[measure] + (f" [{failed} FAILED]" if failed else "")
        lines.append(_row(label, cells))
    lines.append(
        "  [CPU ms/call]: baseline hop A+hop B; Apply: receiver; StartReview: orchestrator; "
        "Approve and review in turn: orchestrator+receiver (each summed over its processes)"
    )
    reconcile = results.reconcile
    if reconcile is not None:
        lines.append(
            f"reconciler: settled {reconcile.settled:,} of {reconcile.backlog:,} Unknowns in one pass of "
            f"{reconcile.pass_seconds:.2f} s = {reconcile.settle_rps:,.0f}/s "
            f"({reconcile.wall_seconds:.2f} s with the process start)"
        )
        lines.append(f"  seeded in {reconcile.seed_seconds:.1f} s: {_reconcile.SEED_METHOD}")
    inprocess = results.inprocess
    if inprocess is not None:
        first = table[f"{APPROVE_FIRST}_rps{suffix}"].value
        lines.append(
            f"in process, no network (Agent Framework alone: open, resume from an in-memory checkpoint, one "
            f"effect in a dict; one job at a time): {inprocess.jobs_per_second:,.0f} jobs/s, "
            f"{inprocess.cpu_ms_per_job:.1f} CPU ms per job; first Approve at {HEADLINE_IN_FLIGHT} in flight "
            f"= {first / inprocess.jobs_per_second:.2f}x that"
        )
    lines += _costs.render(results)
    lines.append(
        "resident memory after the run: "
        + ", ".join(f"{name} {kib / 1024:.0f} MiB" for name, kib in results.rss_kib.items())
    )
    lines.append("")
    return lines


def render(runs: list[Results], table: dict[str, Figure], machine_info: dict[str, Any]) -> str:
    """Return the human tables of the runs, with the targets and whether each is met."""
    plan = runs[0].plan
    lines = [
        f"decisionflow benchmark — {runs[0].database}"
        + (" — QUICK (fewer calls, fewer rounds, smaller backlog; not comparable)" if plan.quick else ""),
        f"machine: {machine_info['cpu']}, {machine_info['cores']} cores, Python {machine_info['python']}; "
        f"load average before {machine_info['load_average_before']}, after {machine_info['load_average_after']}",
        f"rounds: {plan.rounds} (baseline and real interleaved); calls per measurement per round: "
        + ", ".join(f"{plan.calls[c]} at {c}" for c in CONCURRENCIES),
        "",
    ]
    for results in runs:
        lines += _render_run(results, table)
    lines.append(
        f"identity, 2 KB body: {runs[0].identity_us:.2f} µs per operation id "
        f"({runs[0].identities_us:.2f} µs for operation, evidence and policy ids)"
    )
    lines.append("")
    lines.append("targets (16 in flight unless _c1):")
    for target in targets(runs):
        if target.figure not in table:
            continue
        figure = table[target.figure]
        if target.of_baseline and figure.ratio is not None:
            shown = f"{figure.ratio:.2f} x baseline"
        else:
            shown = f"{figure.value:,.2f}"
        verdict = "MET" if target.met(table) else "NOT MET"
        lines.append(f"  {target.describe():<48} {shown:>20}  {verdict}")
    return "\n".join(lines)


def write_json(path: Path, doc: dict[str, Any], dump: Callable[[dict[str, Any]], str]) -> None:
    """Write the JSON document to path (directories created as needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump(doc) + "\n", encoding="utf-8")
