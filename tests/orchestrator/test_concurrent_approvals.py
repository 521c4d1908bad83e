"""Sixteen approvals of one operation at once: one decision, one effect, the rest replays."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from decisionflow.v1 import review_pb2_grpc
from tests.support.stack import (
    Stack,
    approve_all,
    check_one_commit,
    count,
    spawn_orchestrator,
    spawn_receiver,
    start_request,
)

APPROVERS = 16


def test_sixteen_approvals_on_sqlite_one_process(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    op = stack.review().StartReview(start_request(), timeout=10).proposal.operation_id
    check_one_commit(approve_all([stack.review() for _ in range(4)], op, APPROVERS), APPROVERS)
    assert stack.decisions() == 1
    assert stack.effects("T-1042") == 1


@pytest.mark.postgres
@pytest.mark.slow
def test_sixteen_approvals_across_two_processes_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    receiver = spawn_receiver(tmp_path, receiver_url)
    channels: list[grpc.Channel] = []
    try:
        first = spawn_orchestrator(tmp_path, postgres_url, receiver, "orchestrator-1")
        second = spawn_orchestrator(tmp_path, postgres_url, receiver, "orchestrator-2")
        channels = [grpc.insecure_channel(p.target) for p in (first, second)]
        stubs = [review_pb2_grpc.ReviewServiceStub(c) for c in channels]
        op = stubs[0].StartReview(start_request(), timeout=10).proposal.operation_id
        check_one_commit(approve_all(stubs, op, APPROVERS), APPROVERS)
        for process in (first, second):
            assert process.stop() == 0
    finally:
        for channel in channels:
            channel.close()
        receiver.stop()
    assert count(postgres_url, "SELECT count(*) FROM decisions") == 1
    assert count(receiver_url, "SELECT count(*) FROM effects") == 1
