"""A client application with its own OpenTelemetry SDK: starts a review and approves it through the client
library, exporting its spans to the collector named by argv[1]; prints the operation id.

Run as a process (``python -m tests.observability.traced_client ENDPOINT TARGET``) so that its global
tracer provider never leaks into other tests."""

from __future__ import annotations

import sys

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from decisionflow.channels import open_channel
from decisionflow.client import EvidenceItem, PolicyRef, ReviewClient

SERVICE_NAME = "support-desk"


def main(endpoint: str, target: str) -> None:
    """Start and approve one review, then flush the spans."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
    trace.set_tracer_provider(provider)
    channel = open_channel(target)
    try:
        reviews = ReviewClient(channel, timeout=15.0)
        started = reviews.start_review(
            "T-77",
            "record_support_review",
            "Please update to 4.2.1.",
            [EvidenceItem("KB-12", 1, "Update to 4.2.1.")],
            PolicyRef("support-replies", "2026-10", 9, {}),
        )
        reviews.approve(started.proposal.operation_id)
        print(started.proposal.operation_id)
    finally:
        channel.close()
        provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
