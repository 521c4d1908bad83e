"""Prometheus metrics of a reconciler running with --interval, on its own registry, and its health:
NOT_SERVING once a number of passes in a row failed. A pass fails when it could not run (the
orchestrator unreachable or refusing) or when every lookup it made at the receiver failed: such a
pass learnt nothing, and a receiver that is down must not read as a healthy reconciler."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from decisionflow_server.runtime.metrics import MetricsServer, register_process_metrics, serve_metrics
from reconciler.config import METRICS
from reconciler.domain import PassSummary

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ReconcilerMetrics:
    """Counters of what passes did and gauges of what the last completed pass left open."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        unhealthy_after_failed_passes: int = 3,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        register_process_metrics(self.registry)
        self._unhealthy_after = unhealthy_after_failed_passes
        self._wall_clock = wall_clock
        self._consecutive_failures = 0
        self.settled = Counter(
            "decisionflow_reconciler_settled",
            "Operations moved to COMMITTED by a lookup recorded by this reconciler",
            registry=self.registry,
        )
        self.redriven = Counter(
            "decisionflow_reconciler_redriven",
            "Re-drives sent to the orchestrator, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.unknown = Gauge(
            "decisionflow_reconciler_unknown",
            "Operations whose effect was still not confirmed after the last completed pass",
            registry=self.registry,
        )
        self.oldest_unknown_age = Gauge(
            "decisionflow_reconciler_oldest_unknown_age_seconds",
            "Age (since the decision) of the oldest operation left unconfirmed by the last completed pass",
            registry=self.registry,
        )
        self.lookup_latency = Histogram(
            "decisionflow_reconciler_lookup_latency_seconds",
            "Duration of BatchLookup calls to the receiver, retries included",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.lookup_failures = Counter(
            "decisionflow_reconciler_lookup_failures",
            "Operations whose lookup at the receiver failed (receiver unreachable or refusing), per pass",
            registry=self.registry,
        )
        self.escalated = Counter(
            "decisionflow_reconciler_escalated",
            "Operations escalated (first attempt beyond the receiver's key retention: never re-driven), per pass",
            registry=self.registry,
        )
        self.pass_failures = Counter(
            "decisionflow_reconciler_pass_failures",
            "Passes that failed: could not run (orchestrator unreachable or refusing) or every lookup failed",
            registry=self.registry,
        )
        self.last_success = Gauge(
            "decisionflow_reconciler_last_success_timestamp_seconds",
            "Unix time at which the last successful pass ended (0 until one has)",
            registry=self.registry,
        )
        self.consecutive_failed_passes = Gauge(
            "decisionflow_reconciler_consecutive_failed_passes",
            "Passes in a row that failed; back to 0 after a successful pass",
            registry=self.registry,
        )

    def record(self, summary: PassSummary) -> None:
        """Add one pass's counts; the gauges follow only passes that ran to the end (one stopped by a
        signal neither succeeds nor fails); one whose every lookup failed is a failed pass."""
        self.settled.inc(summary.settled)
        self.lookup_failures.inc(summary.lookup_failures)
        self.escalated.inc(summary.escalated)
        outcomes = summary.redriven
        for outcome, count in (
            ("committed", outcomes.committed),
            ("unknown", outcomes.unknown),
            ("rejected", outcomes.rejected),
            ("already_settled", outcomes.already_settled),
            ("failed", outcomes.failed),
        ):
            self.redriven.labels(outcome=outcome).inc(count)
        if not summary.completed:
            return
        # The listing came from the orchestrator, so what the pass left open is true even when no
        # lookup reached the receiver.
        self.unknown.set(summary.still_unknown)
        self.oldest_unknown_age.set(summary.oldest_unknown_age_seconds or 0.0)
        if summary.lookups_all_failed:
            self.pass_failed()
            return
        self.last_success.set(self._wall_clock())
        self._consecutive_failures = 0
        self.consecutive_failed_passes.set(0)

    def pass_failed(self) -> None:
        """Count a failed pass; the gauges of the last completed pass are kept, so an unreachable
        orchestrator never reads as "nothing Unknown"."""
        self.pass_failures.inc()
        self._consecutive_failures += 1
        self.consecutive_failed_passes.set(self._consecutive_failures)

    def healthy(self) -> bool:
        """Whether fewer passes in a row than the threshold failed."""
        return self._consecutive_failures < self._unhealthy_after

    def serve(self, port: int, address: str = "127.0.0.1") -> MetricsServer:
        """Serve the registry on address:port (0 picks a free port), with /healthz answering 200
        SERVING or 503 NOT_SERVING; raise StartupError when it cannot bind."""
        return serve_metrics(self.registry, port, address, METRICS, healthy=self.healthy)
