"""What a call costs against the work it needs: each service's CPU per call as a ratio to a figure the
same run measures (a bare hop of the chain, or the whole job on the workflow framework alone), so
that a faster or slower machine does not move it.

| figure | numerator | denominator |
|---|---|---|
| apply_x_hop_b | receiver CPU per created Apply | hop B's CPU per chain call |
| replay_x_hop_a | orchestrator CPU per replayed Approve | hop A's CPU per chain call |
| start_review_x_job | orchestrator CPU per StartReview | CPU per in-process job |
| first_approve_x_job | orchestrator + receiver CPU per first Approve | CPU per in-process job |
| review_x_job | StartReview + first Approve, every service | CPU per in-process job |
| review_in_turn_x_job | a review opened then answered in one call of the load, every service | CPU per in-process job |
| first_approve_rps_x_jobs | first Approves/s | in-process jobs/s |

All at 16 calls in flight; the first Approve's p50 with one call in flight is reported beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench._run import APPLY_CREATED, APPROVE_FIRST, APPROVE_REPLAY, BASELINE, REVIEW_IN_TURN, START_REVIEW, Results

IN_FLIGHT = 16


@dataclass(frozen=True, slots=True)
class Cost:
    """One ratio with the two figures it is made of."""

    name: str
    label: str
    numerator: float
    denominator: float
    unit: str

    @property
    def ratio(self) -> float | None:
        """numerator / denominator, None when the denominator was not measured."""
        return self.numerator / self.denominator if self.denominator > 0 else None


def costs(results: Results) -> list[Cost]:
    """The ratios of one run (those whose in-process job was not measured have no denominator)."""

    def cpu(measure: str, service: str) -> float:
        return results.cpu_ms_per_call(measure, IN_FLIGHT, service)

    job_ms = results.inprocess.cpu_ms_per_job if results.inprocess is not None else 0.0
    jobs_rps = results.inprocess.jobs_per_second if results.inprocess is not None else 0.0
    first = cpu(APPROVE_FIRST, "orchestrator") + cpu(APPROVE_FIRST, "receiver")
    start = cpu(START_REVIEW, "orchestrator")
    ms = "CPU ms"
    return [
        Cost(
            "apply_x_hop_b",
            "receiver Apply (created) / hop B",
            cpu(APPLY_CREATED, "receiver"),
            cpu(BASELINE, "baseline_b"),
            ms,
        ),
        Cost(
            "replay_x_hop_a",
            "replayed Approve, orchestrator / hop A",
            cpu(APPROVE_REPLAY, "orchestrator"),
            cpu(BASELINE, "baseline_a"),
            ms,
        ),
        Cost("start_review_x_job", "StartReview, orchestrator / in-process job", start, job_ms, ms),
        Cost("first_approve_x_job", "first Approve, orchestrator + receiver / in-process job", first, job_ms, ms),
        Cost("review_x_job", "StartReview + first Approve, all services / in-process job", start + first, job_ms, ms),
        Cost(
            "review_in_turn_x_job",
            "review in turn, all services / in-process job",
            cpu(REVIEW_IN_TURN, "orchestrator") + cpu(REVIEW_IN_TURN, "receiver"),
            job_ms,
            ms,
        ),
        Cost(
            "first_approve_rps_x_jobs",
            "first Approves/s / in-process jobs/s",
            results.of(APPROVE_FIRST, IN_FLIGHT).rps,
            jobs_rps,
            "per s",
        ),
    ]


def render(results: Results) -> list[str]:
    """The lines that print the ratios of one run, each beside its two figures."""
    lines = [f"cost per call against the work it needs ({IN_FLIGHT} in flight; ratio = numerator / denominator):"]
    for cost in costs(results):
        shown = "n/a" if cost.ratio is None else f"{cost.ratio:.2f}x"
        lines.append(f"  {cost.label:<58} {shown:>7}  ({cost.numerator:.2f} / {cost.denominator:.2f} {cost.unit})")
    p50 = results.of(APPROVE_FIRST, 1).latency_ms(0.50)
    lines.append(f"  first Approve p50 with 1 in flight {p50:.1f} ms")
    return lines
