"""The metrics of periodic jobs, on a service's registry: when each job's last run started and
finished, how long it took, and its runs counted by outcome."""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge

Outcome = Literal["succeeded", "unavailable", "failed", "skipped"]
OUTCOMES: tuple[Outcome, ...] = ("succeeded", "unavailable", "failed", "skipped")
"""succeeded; unavailable (a transient failure: the database could not answer); failed (any other
exception); skipped (another runner held the job's lock)."""

# ``job`` is the label Prometheus gives every series of a scrape target.
LABEL = "periodic_job"


class PeriodicMetrics:
    """The periodic-job families on one registry; each job's series exist from its start (at 0)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.last_started = Gauge(
            "decisionflow_periodic_last_run_started_timestamp_seconds",
            "When the job's last run started (Unix time); 0 before its first",
            [LABEL],
            registry=registry,
        )
        self.last_finished = Gauge(
            "decisionflow_periodic_last_run_finished_timestamp_seconds",
            "When the job's last run ended, whatever its outcome (Unix time); 0 before its first",
            [LABEL],
            registry=registry,
        )
        self.last_duration = Gauge(
            "decisionflow_periodic_last_run_duration_seconds",
            "How long the job's last finished run took",
            [LABEL],
            registry=registry,
        )
        self.runs = Counter(
            "decisionflow_periodic_runs",
            "Runs of the job, by outcome: succeeded, unavailable (the database could not answer), failed "
            "(any other error), skipped (another replica or worker held the job's lock)",
            [LABEL, "outcome"],
            registry=registry,
        )

    def declare(self, job: str) -> None:
        """Create job's series at 0, so a job that has not run yet is seen as such."""
        self.last_started.labels(job)
        self.last_finished.labels(job)
        self.last_duration.labels(job)
        for outcome in OUTCOMES:
            self.runs.labels(job, outcome)

    def started(self, job: str, at: float) -> None:
        """Record that a run of job started at (Unix time)."""
        self.last_started.labels(job).set(at)

    def finished(self, job: str, at: float, seconds: float, outcome: Outcome) -> None:
        """Record that a run of job ended at (Unix time) after seconds, with outcome."""
        self.last_finished.labels(job).set(at)
        self.last_duration.labels(job).set(seconds)
        self.runs.labels(job, outcome).inc()
