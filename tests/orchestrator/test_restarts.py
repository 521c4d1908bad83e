"""Restarts across real processes: nothing carries over in memory between A, B and C."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from decisionflow import reasons
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, review_pb2, review_pb2_grpc
from tests.support.servers import ServiceProcess
from tests.support.stack import approve, count, decline, spawn_orchestrator, spawn_receiver, start_request


def _stub(process: ServiceProcess) -> tuple[grpc.Channel, review_pb2_grpc.ReviewServiceStub]:
    channel = grpc.insecure_channel(process.target)
    return channel, review_pb2_grpc.ReviewServiceStub(channel)


def _log_events(process: ServiceProcess) -> list[dict[str, object]]:
    return [json.loads(line) for line in process.stderr().splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_begin_in_a_approve_in_b_replay_in_c(tmp_path: Path) -> None:
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    orchestrator_url = f"sqlite:///{tmp_path / 'orchestrator.db'}"
    receiver = spawn_receiver(tmp_path, receiver_url)
    try:
        a = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "orchestrator-a")
        channel, review = _stub(a)
        started = review.StartReview(start_request(), timeout=10)
        op = started.proposal.operation_id
        assert started.pending_review.checkpoint_id
        channel.close()
        assert a.stop() == 0
        assert count(orchestrator_url, "SELECT count(*) FROM checkpoints") >= 1

        b = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "orchestrator-b")
        channel, review = _stub(b)
        result = review.Approve(approve(op), timeout=15)
        assert result.outcome == common_pb2.OUTCOME_COMMITTED and not result.replay
        receipt = result.operation.receipt.receipt_id
        channel.close()
        assert b.stop() == 0
        # One line per call: the Approve's access line names the checkpoint the request was re-emitted
        # from and the outcome.
        [approved] = [e for e in _log_events(b) if e.get("rpc") == "/decisionflow.v1.ReviewService/Approve"]
        assert approved["operation_id"] == op
        assert approved["checkpoint_id"] == started.pending_review.checkpoint_id
        assert approved["outcome"] == "committed"
        assert not [
            e for e in _log_events(b) if e.get("logger") == "decisionflow.orchestrator" and e.get("operation_id")
        ]

        c = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "orchestrator-c")
        channel, review = _stub(c)
        replay = review.Approve(approve(op), timeout=15)
        assert replay.replay and replay.outcome == common_pb2.OUTCOME_COMMITTED
        assert replay.operation.receipt.receipt_id == receipt
        with pytest.raises(grpc.RpcError) as conflict:
            review.Approve(decline(op), timeout=15)
        assert conflict.value.code() == grpc.StatusCode.ALREADY_EXISTS
        reason, metadata, _ = error_info(conflict.value)
        assert reason == reasons.DECISION_CONFLICT and metadata[reasons.RECORDED_DECISION] == "DECISION_APPROVE"
        state = review.GetOperation(review_pb2.GetOperationRequest(operation_id=op), timeout=5).operation
        assert state.decision == common_pb2.DECISION_APPROVE and state.state == common_pb2.OPERATION_STATE_COMMITTED

        # Another case: decline, then approve → conflict, no effect.
        other = review.StartReview(start_request(case_id="T-1050"), timeout=10).proposal.operation_id
        declined = review.Approve(decline(other), timeout=15)
        assert declined.outcome == common_pb2.OUTCOME_DECLINED
        with pytest.raises(grpc.RpcError) as late:
            review.Approve(approve(other), timeout=15)
        assert late.value.code() == grpc.StatusCode.ALREADY_EXISTS

        # Decision unspecified → INVALID_ARGUMENT, nothing recorded.
        third = review.StartReview(start_request(case_id="T-1051"), timeout=10).proposal.operation_id
        with pytest.raises(grpc.RpcError) as omitted:
            review.Approve(review_pb2.ApproveRequest(operation_id=third), timeout=15)
        assert omitted.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(omitted.value)[0] == reasons.DECISION_REQUIRED
        channel.close()
        assert c.stop() == 0
    finally:
        receiver.stop()
    assert count(receiver_url, "SELECT count(*) FROM effects WHERE case_id = 'T-1042'") == 1
    assert count(receiver_url, "SELECT count(*) FROM effects") == 1
    assert count(orchestrator_url, "SELECT count(*) FROM decisions") == 2
    assert count(orchestrator_url, f"SELECT count(*) FROM decisions WHERE operation_id = '{third}'") == 0
