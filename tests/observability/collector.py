"""A small OTLP/gRPC trace collector for tests: a real gRPC server that keeps every exported span."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

KIND_NAMES = {
    trace_pb2.Span.SPAN_KIND_SERVER: "SERVER",
    trace_pb2.Span.SPAN_KIND_CLIENT: "CLIENT",
    trace_pb2.Span.SPAN_KIND_INTERNAL: "INTERNAL",
    trace_pb2.Span.SPAN_KIND_PRODUCER: "PRODUCER",
    trace_pb2.Span.SPAN_KIND_CONSUMER: "CONSUMER",
}


@dataclass(frozen=True)
class CollectedSpan:
    """One exported span with the service.name of the process that sent it."""

    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]


def _value(any_value: Any) -> Any:
    which = any_value.WhichOneof("value")
    return getattr(any_value, which) if which else None


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """Keeps the spans of every ExportTraceServiceRequest it receives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[CollectedSpan] = []

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        """Keep the request's spans."""
        collected = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    collected.append(
                        CollectedSpan(
                            str(resource.get("service.name", "")),
                            span.name,
                            KIND_NAMES.get(span.kind, str(span.kind)),
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            {a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        with self._lock:
            self._spans.extend(collected)
        return trace_service_pb2.ExportTraceServiceResponse()

    @property
    def spans(self) -> list[CollectedSpan]:
        """Every span collected so far."""
        with self._lock:
            return list(self._spans)


@contextmanager
def running_collector() -> Iterator[tuple[Collector, int]]:
    """Serve a Collector on a free loopback port; yield it and the port."""
    collector = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield collector, port
    finally:
        server.stop(None)


def ancestors(span: CollectedSpan, spans: list[CollectedSpan]) -> list[str]:
    """Return the span ids from span's parent up to its trace's root."""
    by_id = {s.span_id: s for s in spans}
    chain: list[str] = []
    parent = span.parent_span_id
    while parent:
        chain.append(parent)
        parent = by_id[parent].parent_span_id if parent in by_id else ""
    return chain


def span_tree(spans: list[CollectedSpan]) -> str:
    """Render spans of one trace as an indented tree, parents before children."""
    children: dict[str, list[CollectedSpan]] = {}
    ids = {s.span_id for s in spans}
    for span in spans:
        children.setdefault(span.parent_span_id if span.parent_span_id in ids else "", []).append(span)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in children.get(parent, []):
            attributes = {k: v for k, v in span.attributes.items() if k.startswith(("decisionflow.", "rpc.grpc"))}
            shown = f" {attributes}" if attributes else ""
            lines.append(f"{'  ' * depth}{span.kind:8} {span.name}  [{span.service}]{shown}")
            walk(span.span_id, depth + 1)

    walk("", 0)
    return "\n".join(lines)
