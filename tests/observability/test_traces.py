"""One Approve's trace crosses three processes: the client application, the orchestrator and the receiver.

A real OTLP/gRPC collector runs in the test; the services export to it through the standard OTEL_*
variables, the client application through its own SDK. Stopping the services (SIGTERM) flushes their spans.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from decisionflow_demo.launch import ProcessStack
from tests.observability.collector import CollectedSpan, ancestors, running_collector, span_tree
from tests.observability.traced_client import SERVICE_NAME as CLIENT_SERVICE
from tests.support.cli import ROOT
from tests.support.stack import CHECKPOINT_KEY

APPROVE = "/decisionflow.v1.ReviewService/Approve"
APPLY = "/decisionflow.v1.EffectReceiverService/Apply"


def _otel_env(port: int, service: str) -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


def _one(spans: list[CollectedSpan], **fields: str) -> CollectedSpan:
    found = [s for s in spans if all(getattr(s, k) == v for k, v in fields.items())]
    assert len(found) == 1, f"expected one span with {fields}, found {found}"
    return found[0]


@pytest.mark.slow
def test_one_approve_is_one_trace_across_client_orchestrator_and_receiver(tmp_path: Path) -> None:
    with running_collector() as (collector, port):
        stack = ProcessStack(
            tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}", f"sqlite:///{tmp_path / 'orch.db'}", CHECKPOINT_KEY
        )
        try:
            stack.start_receiver(env=_otel_env(port, "effect-receiver"))
            orchestrator = stack.start_orchestrator(env=_otel_env(port, "orchestrator"))
            client = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tests.observability.traced_client",
                    f"http://127.0.0.1:{port}",
                    orchestrator.target,
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert client.returncode == 0, client.stderr
            operation_id = client.stdout.strip().splitlines()[-1]
        finally:
            stack.close()  # SIGTERM: each service exports its queued spans before it exits
        spans = collector.spans

    client_approve = _one(spans, service=CLIENT_SERVICE, name=APPROVE, kind="CLIENT")
    in_trace = [s for s in spans if s.trace_id == client_approve.trace_id]
    print(f"\nspan tree of one Approve (trace {client_approve.trace_id}):\n{span_tree(in_trace)}")

    server_approve = _one(in_trace, service="orchestrator", name=APPROVE, kind="SERVER")
    client_apply = _one(in_trace, service="orchestrator", name=APPLY, kind="CLIENT")
    server_apply = _one(in_trace, service="effect-receiver", name=APPLY, kind="SERVER")
    assert client_approve.parent_span_id == ""
    assert server_approve.parent_span_id == client_approve.span_id
    # The workflow framework's own spans (run, executor) lie between the Approve and its Apply.
    assert server_approve.span_id in ancestors(client_apply, in_trace)
    assert server_apply.parent_span_id == client_apply.span_id
    for span in (client_approve, server_approve, client_apply, server_apply):
        assert span.attributes["decisionflow.operation_id"] == operation_id, span
        assert span.attributes["rpc.grpc.status_code"] == 0, span
    assert server_approve.attributes["decisionflow.case_id"] == "T-77"
    assert server_approve.attributes["decisionflow.outcome"] == "committed"
    assert server_apply.attributes["decisionflow.outcome"] == "CREATED"
    # StartReview is a trace of its own, and names the operation it created.
    start = _one(spans, service="orchestrator", name="/decisionflow.v1.ReviewService/StartReview", kind="SERVER")
    assert start.trace_id != client_approve.trace_id
    assert start.attributes["decisionflow.operation_id"] == operation_id
