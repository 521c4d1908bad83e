"""Sixteen StartReviews of different content for one case at once: exactly one becomes the case's
current proposal, and every other caller is refused with CASE_HAS_OPEN_PROPOSAL naming it."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from decisionflow import reasons
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, review_pb2, review_pb2_grpc
from tests.support.stack import T1042_BODY, Stack, count, decline, spawn_orchestrator, spawn_receiver, start_request

PROPOSERS = 16
CASE = "T-1042"


def _draft(index: int) -> review_pb2.StartReviewRequest:
    return start_request(case_id=CASE, body=f"{T1042_BODY} (draft {index})")


def _start_all(stubs: list[review_pb2_grpc.ReviewServiceStub]) -> list[review_pb2.StartReviewResponse | grpc.RpcError]:
    def start(index: int) -> review_pb2.StartReviewResponse | grpc.RpcError:
        try:
            return stubs[index % len(stubs)].StartReview(_draft(index), timeout=60)
        except grpc.RpcError as error:
            return error

    with ThreadPoolExecutor(PROPOSERS) as pool:
        return list(pool.map(start, range(PROPOSERS)))


def _check(results: list[review_pb2.StartReviewResponse | grpc.RpcError], current: str) -> None:
    created = [r for r in results if isinstance(r, review_pb2.StartReviewResponse)]
    refused = [r for r in results if isinstance(r, grpc.RpcError)]
    assert len(created) == 1 and created[0].created
    winner = created[0].proposal.operation_id
    assert current == winner
    assert len(refused) == PROPOSERS - 1
    for error in refused:
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
        reason, metadata, _ = error_info(error)
        assert reason == reasons.CASE_HAS_OPEN_PROPOSAL
        assert metadata == {reasons.CASE_ID: CASE, reasons.CURRENT_OPERATION_ID: winner}


def _current(stub: review_pb2_grpc.ReviewServiceStub) -> str:
    return stub.GetProposal(review_pb2.GetProposalRequest(case_id=CASE), timeout=10).proposal.operation_id


def test_sixteen_proposers_on_sqlite_one_wins(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    stubs = [stack.review() for _ in range(4)]
    results = _start_all(stubs)
    _check(results, _current(stubs[0]))
    assert count(stack.orchestrator_url, "SELECT count(*) FROM proposals") == 1


def test_open_proposal_is_replaced_only_when_named_and_a_decided_one_gives_way(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack()
    review = stack.review()
    first = review.StartReview(_draft(1), timeout=10).proposal.operation_id
    # Named: compare-and-set replaces it; the replacement is not an edit, but records what it replaced.
    replacing = _draft(2)
    replacing.expected_operation_id = first
    second = review.StartReview(replacing, timeout=10).proposal
    assert not second.human_edited and second.parent_operation_id == first
    superseded = review.GetOperation(review_pb2.GetOperationRequest(operation_id=first), timeout=10).operation
    assert superseded.state == common_pb2.OPERATION_STATE_SUPERSEDED
    # Naming the replaced one again is stale, and nothing is written.
    stale = _draft(3)
    stale.expected_operation_id = first
    with pytest.raises(grpc.RpcError) as refused:
        review.StartReview(stale, timeout=10)
    reason, metadata, _ = error_info(refused.value)
    assert (refused.value.code(), reason) == (grpc.StatusCode.FAILED_PRECONDITION, reasons.STALE_PROPOSAL)
    assert metadata[reasons.CURRENT_OPERATION_ID] == second.operation_id
    # The same content again is a replay, even without naming anything.
    again = review.StartReview(_draft(2), timeout=10)
    assert not again.created and again.proposal.operation_id == second.operation_id
    # Once decided, the case accepts new content without naming the decided proposal.
    review.Approve(decline(second.operation_id), timeout=10)
    third = review.StartReview(_draft(3), timeout=10)
    assert third.created and _current(review) == third.proposal.operation_id
    assert third.proposal.parent_operation_id == ""  # it replaced nothing
    assert count(stack.orchestrator_url, "SELECT count(*) FROM proposals") == 3


@pytest.mark.postgres
@pytest.mark.slow
def test_sixteen_proposers_across_two_processes_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    receiver = spawn_receiver(tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}")
    channels: list[grpc.Channel] = []
    try:
        first = spawn_orchestrator(tmp_path, postgres_url, receiver, "orchestrator-1")
        second = spawn_orchestrator(tmp_path, postgres_url, receiver, "orchestrator-2")
        channels = [grpc.insecure_channel(p.target) for p in (first, second)]
        stubs = [review_pb2_grpc.ReviewServiceStub(c) for c in channels]
        results = _start_all(stubs)
        _check(results, _current(stubs[1]))
        for process in (first, second):
            assert process.stop() == 0
    finally:
        for channel in channels:
            channel.close()
        receiver.stop()
    assert count(postgres_url, "SELECT count(*) FROM proposals") == 1
