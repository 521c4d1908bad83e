"""A replayed Approve or a RedriveOperation past the receiver's key retention: the receiver refuses the
pruned key, the operation stays Unknown, and no second effect is written (real processes)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from decisionflow.processes import child_environment
from decisionflow.stack import ProcessStack
from decisionflow.v1 import common_pb2, operations_pb2, operations_pb2_grpc, review_pb2, review_pb2_grpc
from tests.support.reconciling import LOST_REPLY
from tests.support.stack import CHECKPOINT_KEY, approve, count, start_request

ROOT = Path(__file__).resolve().parents[2]
RETENTION_SECONDS = 2
UNKNOWN = common_pb2.OUTCOME_UNKNOWN


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[ProcessStack]:
    """A receiver that commits every Apply and loses its reply, keeping keys for 2 s (pruned on command)."""
    running = ProcessStack(
        tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}", f"sqlite:///{tmp_path / 'orchestrator.db'}", CHECKPOINT_KEY
    )
    try:
        running.start_receiver(
            failpoints=LOST_REPLY,
            args=["--key-retention-seconds", str(RETENTION_SECONDS), "--prune-interval-seconds", "0"],
        )
        running.start_orchestrator(args=["--receiver-timeout-seconds", "1"])
        yield running
    finally:
        running.close()


def _effects(stack: ProcessStack, case_id: str) -> int:
    return count(stack.receiver_url, f"SELECT count(*) FROM effects WHERE case_id = '{case_id}'")


def _approve_unknown(review: review_pb2_grpc.ReviewServiceStub, case_id: str) -> str:
    op = str(review.StartReview(start_request(case_id=case_id), timeout=10).proposal.operation_id)
    try:
        assert review.Approve(approve(op), timeout=3).outcome == UNKNOWN
    except grpc.RpcError as error:
        # The orchestrator's own retries each lose their reply too; the deadline may pass first.
        assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED, error
    return op


def _state(review: review_pb2_grpc.ReviewServiceStub, op: str) -> int:
    return int(review.GetOperation(review_pb2.GetOperationRequest(operation_id=op), timeout=5).operation.state)


def _prune(stack: ProcessStack) -> int:
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "effect_receiver.main", "prune-keys"),
            *("--database-url", stack.receiver_url, "--key-retention-seconds", str(RETENTION_SECONDS)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env=child_environment(),
    )
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["keys"])


@pytest.mark.slow
def test_a_replay_or_redrive_past_the_retention_stays_unknown_and_writes_no_second_effect(
    stack: ProcessStack,
) -> None:
    orchestrator = stack.orchestrators[0]
    with grpc.insecure_channel(orchestrator.target) as channel:
        review = review_pb2_grpc.ReviewServiceStub(channel)
        operations = operations_pb2_grpc.OperationsServiceStub(channel)
        replayed = _approve_unknown(review, "RETAIN-REPLAY")
        redriven = _approve_unknown(review, "RETAIN-REDRIVE")
        assert (_effects(stack, "RETAIN-REPLAY"), _effects(stack, "RETAIN-REDRIVE")) == (1, 1)

        time.sleep(RETENTION_SECONDS + 0.5)
        assert _prune(stack) == 2
        assert (_effects(stack, "RETAIN-REPLAY"), _effects(stack, "RETAIN-REDRIVE")) == (0, 0)

        # The effects were written and pruned: writing either key again would apply it a second time.
        again = review.Approve(approve(replayed), timeout=10)
        assert (again.outcome, again.replay) == (UNKNOWN, True)
        redrive = operations.RedriveOperation(operations_pb2.RedriveOperationRequest(operation_id=redriven), timeout=10)
        assert redrive.outcome == UNKNOWN
        assert _state(review, replayed) == _state(review, redriven) == common_pb2.OPERATION_STATE_UNKNOWN

    assert (_effects(stack, "RETAIN-REPLAY"), _effects(stack, "RETAIN-REDRIVE")) == (0, 0)
    log = orchestrator.stderr()
    for op in (replayed, redriven):
        assert f"operation {op} was first attempted beyond the receiver's key retention" in log
