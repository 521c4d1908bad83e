"""A receiver outage across real processes: the receiver is stopped (SIGTERM) and started again on the
same port and database while the orchestrator keeps running.

An approval made during the outage ends with outcome Unknown (the decision stands, the effect's
fate is open: docs/review-protocol.md); an approval made the moment the receiver is SERVING
again commits, so does one a second later, and the Unknown one settles on a replay. The time from
the receiver's return to the first commit is printed (``-s``); ``--outage-seconds 10,30,60``
measures several outages.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from decisionflow.v1 import common_pb2, review_pb2_grpc
from decisionflow_demo.launch import ProcessStack
from decisionflow_server.foundation.processes import free_port
from tests.support.stack import CHECKPOINT_KEY, approve, count, start_request


def _start_reviews(review: review_pb2_grpc.ReviewServiceStub, cases: int) -> list[str]:
    return [
        review.StartReview(start_request(case_id=f"OUT-{index}"), timeout=10).proposal.operation_id
        for index in range(cases)
    ]


@pytest.mark.slow
def test_approvals_commit_promptly_after_a_receiver_outage(tmp_path: Path, outage_seconds: float) -> None:
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    stack = ProcessStack(tmp_path, receiver_url, f"sqlite:///{tmp_path / 'orchestrator.db'}", CHECKPOINT_KEY)
    address = ["--address", f"127.0.0.1:{free_port()}"]
    try:
        stack.start_receiver(args=address)
        orchestrator = stack.start_orchestrator()
        with grpc.insecure_channel(orchestrator.target) as channel:
            review = review_pb2_grpc.ReviewServiceStub(channel)
            before, during, first, after = _start_reviews(review, 4)
            assert review.Approve(approve(before), timeout=10).outcome == common_pb2.OUTCOME_COMMITTED

            assert stack.receiver is not None
            assert stack.receiver.stop() == 0
            went_away = time.monotonic()
            unknown = review.Approve(approve(during), timeout=5)
            assert unknown.outcome == common_pb2.OUTCOME_UNKNOWN
            assert unknown.operation.state == common_pb2.OPERATION_STATE_UNKNOWN
            time.sleep(max(0.0, went_away + outage_seconds - time.monotonic()))

            receiver = stack.start_receiver("receiver-back", args=address)
            receiver.wait_serving()
            back = time.monotonic()
            # Approved the moment the receiver is back: the call waits for the channel to reconnect.
            assert review.Approve(approve(first), timeout=10).outcome == common_pb2.OUTCOME_COMMITTED
            print(f"\nreceiver outage {outage_seconds:g} s: first commit {time.monotonic() - back:.2f} s after SERVING")

            time.sleep(max(0.0, back + 1.0 - time.monotonic()))
            assert review.Approve(approve(after), timeout=10).outcome == common_pb2.OUTCOME_COMMITTED
            replay = review.Approve(approve(during), timeout=10)
            assert replay.replay and replay.outcome == common_pb2.OUTCOME_COMMITTED
        for op in (before, during, first, after):
            assert count(receiver_url, f"SELECT count(*) FROM effects WHERE operation_id = '{op}'") == 1
    finally:
        stack.close()
