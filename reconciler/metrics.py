"""Prometheus metrics of a reconciler running with --interval, on its own registry."""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from reconciler.domain import PassSummary

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ReconcilerMetrics:
    """Counters of what passes did and gauges of what the last completed pass left open."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
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
        self.pass_failures = Counter(
            "decisionflow_reconciler_pass_failures",
            "Passes that could not run (orchestrator unreachable or refusing)",
            registry=self.registry,
        )

    def record(self, summary: PassSummary) -> None:
        """Add one pass's counts; the gauges follow only passes that ran to the end."""
        self.settled.inc(summary.settled)
        outcomes = summary.redriven
        for outcome, count in (
            ("committed", outcomes.committed),
            ("unknown", outcomes.unknown),
            ("rejected", outcomes.rejected),
            ("already_settled", outcomes.already_settled),
            ("failed", outcomes.failed),
        ):
            self.redriven.labels(outcome=outcome).inc(count)
        if summary.completed:
            self.unknown.set(summary.still_unknown)
            self.oldest_unknown_age.set(summary.oldest_unknown_age_seconds or 0.0)

    def serve(self, port: int, address: str = "127.0.0.1") -> MetricsServer:
        """Serve the registry over HTTP on address:port (0 picks a free port)."""
        server, thread = start_http_server(port, addr=address, registry=self.registry)
        return MetricsServer(server, thread)


class MetricsServer:
    """The HTTP server of the metrics endpoint and its thread."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_port)

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
