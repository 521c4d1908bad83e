"""A replayed Approve or a RedriveOperation past the receiver's key retention: the receiver refuses an
absent key, the operation stays Unknown (a re-drive is refused with KEY_RETENTION_EXCEEDED: escalate),
and no second effect is written; a key still on record
replays (real servers in process, and real processes with a real prune)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, operations_pb2, operations_pb2_grpc, review_pb2, review_pb2_grpc
from decisionflow_demo.launch import ProcessStack
from decisionflow_server.foundation.processes import child_environment
from tests.support.reconciling import (
    AFTER_ATTEMPT,
    LOST_REPLY,
    age_first_attempt,
    approve_and_crash,
    approve_unknown,
    operation,
)
from tests.support.stack import CHECKPOINT_KEY, Stack, approve, count, start_request

ROOT = Path(__file__).resolve().parents[2]
RETENTION_SECONDS = 2
UNKNOWN = common_pb2.OUTCOME_UNKNOWN


HOUR = timedelta(hours=1)


def test_an_unknown_operation_first_attempted_beyond_the_retention_is_refused_never_applied(
    make_stack: Callable[..., Stack],
) -> None:
    # The attempt is recorded and the orchestrator fails before Apply: Unknown, no effect anywhere.
    stack = make_stack(receiver={"key_retention": HOUR, "prune_interval_seconds": 0}, failpoints=AFTER_ATTEMPT)
    op = approve_and_crash(stack, "RETAIN-OLD")
    stack.stop_orchestrator()
    stack.start_orchestrator()
    age_first_attempt(stack.orchestrator_url, op, 2 * HOUR)

    again = stack.review().Approve(approve(op), timeout=10)
    assert (again.outcome, again.replay) == (UNKNOWN, True)
    with pytest.raises(grpc.RpcError) as refused:
        stack.operations().RedriveOperation(operations_pb2.RedriveOperationRequest(operation_id=op), timeout=10)
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    reason, metadata, _ = error_info(refused.value)
    assert reason == "KEY_RETENTION_EXCEEDED" and metadata["operation_id"] == op
    assert metadata["key_retention"] == "3600s" and metadata["first_attempted_at"]
    assert operation(stack, op).state == common_pb2.OPERATION_STATE_UNKNOWN
    assert stack.effects("RETAIN-OLD") == 0


def test_an_unknown_operation_within_the_retention_is_applied(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(receiver={"key_retention": HOUR, "prune_interval_seconds": 0}, failpoints=AFTER_ATTEMPT)
    op = approve_and_crash(stack, "RETAIN-FRESH")
    stack.stop_orchestrator()
    stack.start_orchestrator()
    assert stack.review().Approve(approve(op), timeout=10).outcome == common_pb2.OUTCOME_COMMITTED
    assert stack.effects("RETAIN-FRESH") == 1


def test_an_old_operation_whose_effect_is_still_on_record_commits_with_its_receipt(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(receiver_failpoints=LOST_REPLY, receiver={"key_retention": HOUR}, receiver_timeout_seconds=1.0)
    op = approve_unknown(stack, "RETAIN-KEPT")
    stack.stop_orchestrator()
    stack.start_receiver(key_retention=HOUR)  # replies are delivered again from here on
    stack.start_orchestrator()
    age_first_attempt(stack.orchestrator_url, op, 2 * HOUR)

    again = stack.review().Approve(approve(op), timeout=10)
    assert (again.outcome, again.replay) == (common_pb2.OUTCOME_COMMITTED, True)
    assert stack.effects("RETAIN-KEPT") == 1


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
        with pytest.raises(grpc.RpcError) as refused:
            operations.RedriveOperation(operations_pb2.RedriveOperationRequest(operation_id=redriven), timeout=10)
        assert error_info(refused.value)[0] == "KEY_RETENTION_EXCEEDED"
        assert _state(review, replayed) == _state(review, redriven) == common_pb2.OPERATION_STATE_UNKNOWN

    assert (_effects(stack, "RETAIN-REPLAY"), _effects(stack, "RETAIN-REDRIVE")) == (0, 0)
    log = orchestrator.stderr()
    for op in (replayed, redriven):
        assert f"operation {op} was first attempted beyond the receiver's key retention" in log
