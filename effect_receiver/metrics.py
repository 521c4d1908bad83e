"""The receiver's Prometheus metrics, on a registry of its own: the gRPC server families
(``decisionflow_server.runtime.metrics``), ``decisionflow_effects_total{result}``, the outcomes of Apply, and
the periodic jobs' families (key pruning; ``decisionflow_server.runtime.periodic``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from decisionflow.v1 import effect_receiver_pb2
from decisionflow_server.foundation.errors import DomainError
from decisionflow_server.runtime.metrics import (
    GrpcServerMetrics,
    MetricsServer,
    register_process_metrics,
    serve_metrics,
)
from decisionflow_server.runtime.periodic import PeriodicMetrics
from decisionflow_server.runtime.served_calls import Observers
from effect_receiver.config import SERVER
from effect_receiver.errors import IdempotencyKeyReused

APPLY_METHOD = "/" + effect_receiver_pb2.DESCRIPTOR.services_by_name["EffectReceiverService"].full_name + "/Apply"
# The result label: the ApplyResult names (created, replayed), and key_reused for the refusal of a
# key already used with another payload.
APPLY_RESULTS = {
    number: name.removeprefix("APPLY_RESULT_").lower()
    for name, number in effect_receiver_pb2.ApplyResult.items()
    if number != effect_receiver_pb2.APPLY_RESULT_UNSPECIFIED
}
KEY_REUSED = "key_reused"


class ReceiverMetrics:
    """Every metric of one receiver server, on its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        register_process_metrics(self.registry)
        self.grpc = GrpcServerMetrics(self.registry)
        self.effects = Counter(
            "decisionflow_effects",
            "Apply calls answered, by result: created (written now), replayed (written before), "
            "key_reused (refused: the key was used with another payload)",
            ["result"],
            registry=self.registry,
        )
        for result in (*APPLY_RESULTS.values(), KEY_REUSED):
            self.effects.labels(result)
        self.periodic = PeriodicMetrics(self.registry)

    def record_apply(self, response: effect_receiver_pb2.ApplyResponse) -> None:
        """Count one Apply answer."""
        self.effects.labels(APPLY_RESULTS.get(response.result, "unspecified")).inc()

    def record_refusal(self, error: DomainError) -> None:
        """Count a refused Apply when the refusal is a reused key (other refusals show in grpc_code)."""
        if isinstance(error, IdempotencyKeyReused):
            self.effects.labels(KEY_REUSED).inc()

    def answers(self) -> Observers:
        """Return the observers counting Apply's results and refusals (they see the servicer's answer,
        before fault injection can lose its reply)."""
        return Observers({APPLY_METHOD: self.record_apply}, {APPLY_METHOD: self.record_refusal})

    def serve(self, port: int, address: str) -> MetricsServer:
        """Serve the registry over HTTP; raise StartupError when address:port cannot be bound."""
        return serve_metrics(self.registry, port, address, SERVER.metrics)
