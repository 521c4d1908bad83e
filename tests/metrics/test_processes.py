"""Real receiver, orchestrator, reconciler and relay processes with metrics ports: what a StartReview, an
Approve and a refused call leave on the scrapes, and every metric name that deploy/alerts.yml and
deploy/grafana-dashboard.json use is exposed by one of them. (The relay is given a NATS address where nothing
listens: its metrics endpoint serves every family from its start; tests/relay runs it against NATS.)"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from collections.abc import Iterator

import grpc
import pytest
import yaml

from decisionflow.v1 import common_pb2, review_pb2_grpc
from decisionflow_demo.launch import ProcessStack
from decisionflow_server.foundation.processes import child_environment, free_port
from decisionflow_server.foundation.version import installed_version
from orchestrator.audit_log.signing import DEFAULT_ORIGIN, write_new_key
from tests.metrics.scrape import Scrape, scrape, scrape_settled, wait_until
from tests.support.reconciling import ROOT, reconciler_command
from tests.support.stack import CHECKPOINT_KEY, approve, decline, start_request

ALERTS = yaml.safe_load((ROOT / "deploy" / "alerts.yml").read_text())
DASHBOARD = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
METRIC_NAME = re.compile(r"\b(?:grpc_server|decisionflow)_[a-z0-9_]+\b")


def alert_exprs() -> list[str]:
    """The expression of every alerting rule."""
    return [rule["expr"] for group in ALERTS["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    """The PromQL of every dashboard panel's targets."""
    return [target["expr"] for panel in DASHBOARD["panels"] for target in panel["targets"]]


def used_names(exprs: list[str]) -> set[str]:
    """The metric names an expression reads (label values such as decisionflow.v1.ReviewService aside)."""
    # Label matchers may hold dotted service names; drop quoted strings before looking for names.
    return {name for expr in exprs for name in METRIC_NAME.findall(re.sub(r'"[^"]*"', '""', expr))}


class Running:
    """The scrapes of the three services after the traffic of the module's fixture."""

    def __init__(self, receiver: Scrape, orchestrator: Scrape, reconciler: Scrape, relay: Scrape) -> None:
        self.receiver = receiver
        self.orchestrator = orchestrator
        self.reconciler = reconciler
        self.relay = relay


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """Receiver and orchestrator processes after StartReview, Approve and a refused Approve, and a
    reconciler loop after its first completed pass."""
    workdir = tmp_path_factory.mktemp("metrics-processes")
    stack = ProcessStack(
        workdir, f"sqlite:///{workdir / 'receiver.db'}", f"sqlite:///{workdir / 'orchestrator.db'}", CHECKPOINT_KEY
    )
    ports = {name: free_port() for name in ("receiver", "orchestrator", "reconciler", "relay")}
    reconciler = relay = None
    try:
        stack.start_receiver(args=["--metrics-port", str(ports["receiver"])])
        # With an audit signing key: only a signer exports what the checkpoint alert reads.
        key_file = workdir / "audit.key"
        write_new_key(key_file, DEFAULT_ORIGIN)
        orchestrator = stack.start_orchestrator(
            args=["--metrics-port", str(ports["orchestrator"]), "--audit-signing-key-file", str(key_file)]
        )
        with grpc.insecure_channel(orchestrator.target) as channel:
            review = review_pb2_grpc.ReviewServiceStub(channel)
            op = review.StartReview(start_request(), timeout=10).proposal.operation_id
            assert review.Approve(approve(op), timeout=30).outcome == common_pb2.OUTCOME_COMMITTED
            with pytest.raises(grpc.RpcError) as refused:
                review.Approve(decline(op), timeout=10)
            assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert stack.receiver is not None
        reconciler = subprocess.Popen(
            reconciler_command(
                [
                    "--interval",
                    "0.2",
                    "--metrics-port",
                    str(ports["reconciler"]),
                    "--orchestrator-target",
                    orchestrator.target,
                    "--receiver-target",
                    stack.receiver.target,
                ]
            ),
            cwd=ROOT,
            env=child_environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        passed = wait_until(
            lambda: scrape(ports["reconciler"]).value("decisionflow_reconciler_last_success_timestamp_seconds") > 0
        )
        assert passed, "the reconciler never completed a pass"
        (workdir / "relay").mkdir()
        relay = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "decisionflow_relay.main",
                "--metrics-port",
                str(ports["relay"]),
                "--orchestrator-target",
                orchestrator.target,
                "--cursor-file",
                str(workdir / "relay" / "cursor"),
                "--nats-url",
                f"nats://127.0.0.1:{free_port()}",
            ],
            cwd=ROOT,
            env=child_environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert wait_until(lambda: bool(scrape(ports["relay"]).names)), "the relay never served its metrics"
        settled = {name: scrape_settled(ports[name]) for name in ("receiver", "orchestrator", "reconciler")}
        yield Running(settled["receiver"], settled["orchestrator"], settled["reconciler"], scrape(ports["relay"]))
    finally:
        for process in (relay, reconciler):
            if process is not None:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(15)
        stack.close()


@pytest.mark.slow
def test_an_approval_and_a_refusal_show_on_the_scrapes(running: Running) -> None:
    seen = running.orchestrator
    approve_calls = {"grpc_service": "decisionflow.v1.ReviewService", "grpc_method": "Approve", "grpc_type": "unary"}
    assert seen.value("grpc_server_handled_total", **approve_calls, grpc_code="OK") == 1
    assert seen.value("grpc_server_handled_total", **approve_calls, grpc_code="ALREADY_EXISTS") == 1
    assert seen.value("grpc_server_started_total", **approve_calls) == 2
    assert seen.value("decisionflow_approvals_total", outcome="committed", replay="false") == 1
    assert seen.value("decisionflow_operations", state="COMMITTED") == 1
    assert seen.value("decisionflow_checkpoint_bytes_total") > 0
    assert seen.value("decisionflow_receiver_call_seconds_count", result="committed") == 1
    assert running.receiver.value("decisionflow_effects_total", result="created") == 1
    apply_calls = {
        "grpc_service": "decisionflow.v1.EffectReceiverService",
        "grpc_method": "Apply",
        "grpc_type": "unary",
    }
    assert running.receiver.value("grpc_server_handled_total", **apply_calls, grpc_code="OK") == 1
    # The reconciler found nothing open: the orchestrator had settled everything itself.
    assert running.reconciler.value("decisionflow_reconciler_unknown") == 0
    assert running.reconciler.value("decisionflow_reconciler_consecutive_failed_passes") == 0


@pytest.mark.slow
@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_every_metric_the_monitoring_files_use_is_exposed(running: Running, source: str) -> None:
    exprs = alert_exprs() if source == "alerts" else dashboard_exprs()
    used = used_names(exprs)
    assert used, f"no metric names found in the {source}"
    exposed = running.receiver.names | running.orchestrator.names | running.reconciler.names | running.relay.names
    assert not sorted(used - exposed), f"the {source} use names no service exposes"


@pytest.mark.slow
def test_the_absence_alerts_read_a_metric_the_running_reconciler_and_relay_expose(running: Running) -> None:
    absent = [name for expr in alert_exprs() for name in re.findall(r"absent\(\s*([a-z_:][a-z0-9_:]*)", expr)]
    assert absent == ["decisionflow_reconciler_last_success_timestamp_seconds", "decisionflow_relay_cursor_index"]
    assert absent[0] in running.reconciler.names and absent[1] in running.relay.names


def test_names_are_read_from_expressions_not_from_label_values() -> None:
    expr = 'rate(grpc_server_handled_total{grpc_service="decisionflow.v1.ReviewService"}[5m])'
    assert used_names([expr]) == {"grpc_server_handled_total"}
    assert "decisionflow_oldest_unknown_age_seconds" in used_names(alert_exprs())
    assert "grpc_server_handling_seconds_bucket" in used_names(alert_exprs())
    assert "decisionflow_reconciler_last_success_timestamp_seconds" in used_names(dashboard_exprs())


@pytest.mark.slow
def test_every_service_exposes_its_process_python_and_build(running: Running) -> None:
    for seen in (running.receiver, running.orchestrator, running.reconciler, running.relay):
        for name in ("process_resident_memory_bytes", "process_start_time_seconds"):
            assert seen.value(name) > 0, name
        # Counted in clock ticks (10 ms) by the Prometheus client: a fast start can read as none.
        assert seen.value("process_cpu_seconds_total") >= 0
        assert seen.value("process_open_fds") > 0
        assert seen.total("python_info", version=platform.python_version()) == 1
        assert seen.value("decisionflow_build_info", version=installed_version(), python=platform.python_version()) == 1
