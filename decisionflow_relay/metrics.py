"""Prometheus metrics of the relay, on its own registry (docs/events.md, "The relay into NATS JetStream").

decisionflow_relay_published_total            events JetStream acknowledged (duplicates included)
decisionflow_relay_duplicates_total           of those, acknowledged as duplicates (ack.duplicate)
decisionflow_relay_publish_errors_total       publish attempts not acknowledged (each retried)
decisionflow_relay_cursor_index               the cursor stored in the cursor file
decisionflow_relay_lag_events                 newest position seen on the feed less the cursor
decisionflow_relay_lag_seconds                now less occurred_at of the oldest event not yet
                                              acknowledged; 0 when caught up
decisionflow_relay_broker_up                  1 while publishes are acknowledged, 0 in an outage and before
                                              NATS first answers
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from decisionflow_relay.config import METRICS
from decisionflow_server.runtime.metrics import MetricsServer, register_process_metrics, serve_metrics


class RelayMetrics:
    """The relay's counters and gauges; the lag gauges are read from the relay when scraped."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        register_process_metrics(self.registry)
        self.published = Counter(
            "decisionflow_relay_published",
            "Events JetStream acknowledged, duplicates included",
            registry=self.registry,
        )
        self.duplicates = Counter(
            "decisionflow_relay_duplicates",
            "Events JetStream acknowledged as duplicates of a message with the same Nats-Msg-Id (re-sends)",
            registry=self.registry,
        )
        self.publish_errors = Counter(
            "decisionflow_relay_publish_errors",
            "Publish attempts JetStream did not acknowledge (broker down, no stream leader, timeout); each is retried",
            registry=self.registry,
        )
        self.cursor = Gauge(
            "decisionflow_relay_cursor_index",
            "The cursor stored in the cursor file: every event below it was acknowledged by JetStream",
            registry=self.registry,
        )
        self.lag_events = Gauge(
            "decisionflow_relay_lag_events",
            "The newest position seen on the event feed (events and heartbeats) less the cursor",
            registry=self.registry,
        )
        self.lag_seconds = Gauge(
            "decisionflow_relay_lag_seconds",
            "Now less the occurred_at of the oldest event not yet acknowledged by JetStream; 0 when caught up",
            registry=self.registry,
        )
        self.broker_up = Gauge(
            "decisionflow_relay_broker_up",
            "1 while JetStream acknowledges publishes; 0 before the first connection, and from a failed publish "
            "until one succeeds",
            registry=self.registry,
        )
        self.broker_up.set(0)  # until the first connection: a relay waiting for NATS must not look healthy

    def follow(self, lag_events: Callable[[], float], lag_seconds: Callable[[], float]) -> None:
        """Read the lag gauges from these functions at each scrape."""
        self.lag_events.set_function(lag_events)
        self.lag_seconds.set_function(lag_seconds)

    def serve(self, port: int, address: str = "127.0.0.1") -> MetricsServer:
        """Serve the registry on address:port (0 picks a free port); StartupError when it cannot bind."""
        return serve_metrics(self.registry, port, address, METRICS)
