"""Metrics of in-process servers, scraped over HTTP: the gRPC families see the code the caller got
(refusals of the status table, of request parsing and of authentication included), and the product
metrics follow what Approve and Apply did."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from decisionflow.v1 import common_pb2, effect_receiver_pb2
from tests.metrics.scrape import scrape, scrape_settled, wait_until
from tests.support.payloads import apply_request
from tests.support.secure import raw_call, start_secure_stack
from tests.support.stack import Stack, approve, decline, start_request

REVIEW = {"grpc_service": "decisionflow.v1.ReviewService", "grpc_type": "unary"}
RECEIVER = {"grpc_service": "decisionflow.v1.EffectReceiverService", "grpc_type": "unary"}


def _metrics_ports(stack: Stack) -> tuple[int, int]:
    orchestrator, receiver = stack.servers[-1].metrics_port, stack.receiver_server.metrics_port
    assert orchestrator and receiver
    return orchestrator, receiver


def test_a_committed_approval_and_refusals_are_counted_with_their_codes(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(metrics_port=0, receiver={"metrics_port": 0})
    orchestrator_port, receiver_port = _metrics_ports(stack)
    review = stack.review()
    op = review.StartReview(start_request(), timeout=10).proposal.operation_id
    assert review.Approve(approve(op), timeout=10).outcome == common_pb2.OUTCOME_COMMITTED
    assert review.Approve(approve(op), timeout=10).replay
    with pytest.raises(grpc.RpcError) as conflict:
        review.Approve(decline(op), timeout=10)  # a different decision than the recorded one
    assert conflict.value.code() == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(grpc.RpcError) as missing:
        review.Approve(approve("op-v1-" + "0" * 64), timeout=10)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    channel = grpc.insecure_channel(f"127.0.0.1:{stack.orchestrator_port}")
    try:  # bytes that are not an ApproveRequest: refused by request parsing, innermost
        code, _ = raw_call(channel, "/decisionflow.v1.ReviewService/Approve", b"\xff\xff\xff")
    finally:
        channel.close()
    assert code == grpc.StatusCode.INVALID_ARGUMENT

    seen = scrape_settled(orchestrator_port)
    approve_calls = {**REVIEW, "grpc_method": "Approve"}
    assert seen.value("grpc_server_started_total", **approve_calls) == 5
    for code_name, calls in (("OK", 2), ("ALREADY_EXISTS", 1), ("NOT_FOUND", 1), ("INVALID_ARGUMENT", 1)):
        assert seen.value("grpc_server_handled_total", **approve_calls, grpc_code=code_name) == calls
    assert seen.value("grpc_server_handling_seconds_count", **approve_calls) == 5
    assert seen.value("grpc_server_handled_total", **REVIEW, grpc_method="StartReview", grpc_code="OK") == 1
    assert seen.value("decisionflow_approvals_total", outcome="committed", replay="false") == 1
    assert seen.value("decisionflow_approvals_total", outcome="committed", replay="true") == 1
    assert seen.total("decisionflow_approvals_total") == 2  # refusals are not outcomes
    assert seen.value("decisionflow_operations", state="COMMITTED") == 1
    assert seen.value("decisionflow_operations", state="UNKNOWN") == 0
    assert seen.value("decisionflow_oldest_unknown_age_seconds") == 0
    assert seen.value("decisionflow_checkpoint_bytes_total") > 0
    assert seen.value("decisionflow_receiver_call_seconds_count", result="committed") == 1

    # At the receiver: the one Apply created the effect; a reused key is counted as such.
    receiver = stack.receiver()
    payload_for_other_case = apply_request(op, case_id="T-9")
    with pytest.raises(grpc.RpcError) as reused:
        receiver.Apply(payload_for_other_case, timeout=10)
    assert reused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    at_receiver = scrape_settled(receiver_port)
    assert at_receiver.value("decisionflow_effects_total", result="created") == 1
    assert at_receiver.value("decisionflow_effects_total", result="replayed") == 0
    assert at_receiver.value("decisionflow_effects_total", result="key_reused") == 1
    apply_calls = {**RECEIVER, "grpc_method": "Apply"}
    assert at_receiver.value("grpc_server_handled_total", **apply_calls, grpc_code="OK") == 1
    assert at_receiver.value("grpc_server_handled_total", **apply_calls, grpc_code="FAILED_PRECONDITION") == 1


def test_authentication_refusals_are_counted_with_their_codes(tmp_path: Path) -> None:
    secure = start_secure_stack(tmp_path, metrics_port=0)
    try:
        port = secure.stack.servers[-1].metrics_port
        assert port
        channel = secure.channel(receiver=False)
        request = start_request().SerializeToString()
        path = "/decisionflow.v1.ReviewService/StartReview"
        assert raw_call(channel, path, request)[0] == grpc.StatusCode.UNAUTHENTICATED
        assert raw_call(channel, path, request, secure.as_("rita"))[0] == grpc.StatusCode.PERMISSION_DENIED
        assert raw_call(channel, path, request, secure.as_("arthur"))[0] == grpc.StatusCode.OK
        seen = scrape_settled(port)
    finally:
        secure.close()
    start_calls = {**REVIEW, "grpc_method": "StartReview"}
    for code_name in ("UNAUTHENTICATED", "PERMISSION_DENIED", "OK"):
        assert seen.value("grpc_server_handled_total", **start_calls, grpc_code=code_name) == 1
    assert seen.value("grpc_server_started_total", **start_calls) == 3


def test_two_servers_in_one_process_keep_their_own_series(make_stack: Callable[..., Stack]) -> None:
    first = make_stack(metrics_port=0, receiver={"metrics_port": 0})
    op = first.review().StartReview(start_request(), timeout=10).proposal.operation_id
    first.review().Approve(approve(op), timeout=10)
    first.start_orchestrator(metrics_port=0)  # a second orchestrator on the same database
    second_port = first.servers[-1].metrics_port
    assert second_port and second_port != first.servers[0].metrics_port
    seen = scrape_settled(second_port)
    assert seen.total("grpc_server_handled_total", grpc_method="Approve") == 0
    assert seen.total("decisionflow_approvals_total") == 0
    # The database-backed gauges are shared truth: the second replica reads the first one's commit.
    assert seen.value("decisionflow_operations", state="COMMITTED") == 1


def test_without_a_metrics_port_nothing_is_served(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    assert stack.servers[-1].metrics_port is None
    assert stack.receiver_server.metrics_port is None
    lookup = effect_receiver_pb2.LookupRequest(operation_id="op-v1-" + "0" * 64)
    assert stack.receiver().Lookup(lookup, timeout=5).result.status == common_pb2.LOOKUP_STATUS_NOT_FOUND


def test_each_server_reports_the_runs_of_its_periodic_jobs(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(
        metrics_port=0,
        audit_interval_seconds=0.1,
        receiver={"metrics_port": 0, "key_retention": timedelta(days=1), "prune_interval_seconds": 0.1},
    )
    orchestrator_port, receiver_port = _metrics_ports(stack)
    for port, job in ((orchestrator_port, "audit-sequencer"), (receiver_port, "prune-keys")):

        def ran_thrice(port: int = port, job: str = job) -> bool:
            return scrape(port).value("decisionflow_periodic_runs_total", periodic_job=job, outcome="succeeded") >= 3

        assert wait_until(ran_thrice), f"{job} never ran three times"
        seen = scrape(port)
        started = seen.value("decisionflow_periodic_last_run_started_timestamp_seconds", periodic_job=job)
        finished = seen.value("decisionflow_periodic_last_run_finished_timestamp_seconds", periodic_job=job)
        assert abs(time.time() - started) < 60
        assert finished > 0  # a run may be in flight while scraped: its end is the last one's
        assert seen.value("decisionflow_periodic_last_run_duration_seconds", periodic_job=job) >= 0
        assert seen.value("decisionflow_periodic_runs_total", periodic_job=job, outcome="failed") == 0
