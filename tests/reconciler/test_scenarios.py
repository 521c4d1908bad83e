"""The two stories the reconciler exists for, across real processes (receiver, orchestrator and
the decisionflow-reconciler command each in its own process; nothing carried in memory):

- the orchestrator dies right after recording the decision: APPROVED, never attempted; one pass
  re-drives it and it is COMMITTED with exactly one effect;
- the receiver commits but the reply is lost: Unknown; one pass looks it up and records the
  receiver's original receipt, without a second Apply.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from decisionflow.v1 import common_pb2, effect_receiver_pb2, effect_receiver_pb2_grpc, review_pb2, review_pb2_grpc
from tests.support.reconciling import run_reconciler
from tests.support.servers import ServiceProcess
from tests.support.stack import approve, count, spawn_orchestrator, spawn_receiver, start_request


def _reconcile(orchestrator: ServiceProcess, receiver: ServiceProcess) -> dict[str, object]:
    run = run_reconciler(
        ["--once", "--json", "--grace-seconds", "0"],
        env={"DECISIONFLOW_ORCHESTRATOR_TARGET": orchestrator.target, "DECISIONFLOW_RECEIVER_TARGET": receiver.target},
    )
    assert run.returncode == 0, run.stderr
    return run.summary


def _operation(review: review_pb2_grpc.ReviewServiceStub, op: str) -> review_pb2.Operation:
    return review.GetOperation(review_pb2.GetOperationRequest(operation_id=op), timeout=5).operation


@pytest.mark.slow
def test_crash_after_decision_is_redriven_to_one_effect(tmp_path: Path) -> None:
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    orchestrator_url = f"sqlite:///{tmp_path / 'orchestrator.db'}"
    receiver = spawn_receiver(tmp_path, receiver_url)
    try:
        crashing = spawn_orchestrator(
            tmp_path, orchestrator_url, receiver, "crashing", failpoints="orchestrator.after_decision=exit"
        )
        with grpc.insecure_channel(crashing.target) as channel:
            review = review_pb2_grpc.ReviewServiceStub(channel)
            op = review.StartReview(start_request(), timeout=10).proposal.operation_id
            # The crashed attempt's lease lasts the shorter of this deadline and the attempt budget, and a
            # second: a re-drive waits that out.
            with pytest.raises(grpc.RpcError):
                review.Approve(approve(op), timeout=2)
        assert crashing.process.wait(15) == 86  # the failpoint's exit status: died after the decision
        assert count(receiver_url, "SELECT count(*) FROM effects") == 0

        orchestrator = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "restarted")
        try:
            with grpc.insecure_channel(orchestrator.target) as channel:
                review = review_pb2_grpc.ReviewServiceStub(channel)
                before = _operation(review, op)
                # The decision and the first attempt are one transaction: attempted, Apply never sent.
                assert before.state == common_pb2.OPERATION_STATE_UNKNOWN and before.attempts == 1
                summary = _reconcile(orchestrator, receiver)
                assert summary["redriven"] == 1
                assert summary["redrive_outcomes"] == {
                    "committed": 1,
                    "unknown": 0,
                    "rejected": 0,
                    "already_settled": 0,
                    "failed": 0,
                }
                assert summary["still_unknown"] == 0
                after = _operation(review, op)
                assert after.state == common_pb2.OPERATION_STATE_COMMITTED and after.attempts == 2
                assert count(receiver_url, "SELECT count(*) FROM effects WHERE case_id = 'T-1042'") == 1
                assert _reconcile(orchestrator, receiver)["examined"] == 0
        finally:
            assert orchestrator.stop() == 0
    finally:
        receiver.stop()


@pytest.mark.slow
def test_lost_reply_is_settled_with_the_original_receipt(tmp_path: Path) -> None:
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    orchestrator_url = f"sqlite:///{tmp_path / 'orchestrator.db'}"
    # The receiver keeps losing Apply replies for the whole test: the pass must settle by lookup.
    receiver = spawn_receiver(tmp_path, receiver_url, failpoints="receiver.commit_then_lose_reply=raise")
    orchestrator = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "orchestrator")
    try:
        with grpc.insecure_channel(orchestrator.target) as channel, grpc.insecure_channel(receiver.target) as rch:
            review = review_pb2_grpc.ReviewServiceStub(channel)
            op = review.StartReview(start_request(), timeout=10).proposal.operation_id
            try:
                answer = review.Approve(approve(op), timeout=2)
            except grpc.RpcError as error:
                # On a busy machine the Unknown reply itself may miss the deadline: no better known.
                assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED, error
            else:
                assert answer.outcome == common_pb2.OUTCOME_UNKNOWN
            unknown = _operation(review, op)
            assert unknown.state == common_pb2.OPERATION_STATE_UNKNOWN
            attempts = unknown.attempts
            original = (
                effect_receiver_pb2_grpc.EffectReceiverServiceStub(rch)
                .Lookup(effect_receiver_pb2.LookupRequest(operation_id=op), timeout=5)
                .result.receipt
            )
            assert original.receipt_id

            summary = _reconcile(orchestrator, receiver)
            assert (summary["examined"], summary["settled"], summary["redriven"]) == (1, 1, 0)
            settled = _operation(review, op)
            assert settled.state == common_pb2.OPERATION_STATE_COMMITTED
            assert settled.receipt.receipt_id == original.receipt_id
            assert settled.receipt.applied_at == original.applied_at
            assert settled.attempts == attempts  # settled by lookup: no further Apply
            assert settled.last_lookup.status == common_pb2.LOOKUP_STATUS_APPLIED
            assert count(receiver_url, "SELECT count(*) FROM effects WHERE case_id = 'T-1042'") == 1
    finally:
        assert orchestrator.stop() == 0
        receiver.stop()
