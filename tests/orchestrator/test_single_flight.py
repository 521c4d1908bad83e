"""Single flight: concurrent approvals and replays of one operation share the attempt in flight.

Apply calls are counted where they arrive, in the receiver's gRPC server metrics
(``grpc_server_started_total`` for Apply), not by the effects stored: a second Apply of the same
key stores nothing new, so only the call count shows a re-drive.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import grpc

from decisionflow.v1 import common_pb2, review_pb2_grpc
from decisionflow.vocabulary import Decision, OperationId
from decisionflow_server.storage import db
from orchestrator.domain import RecordedDecision, effect_payload
from orchestrator.schema import operations
from orchestrator.store import OrchestratorStore
from tests.metrics.scrape import scrape_settled
from tests.support.stack import Stack, approve, approve_all, check_one_commit, start_request

APPROVERS = 50


def _apply_calls(stack: Stack) -> float:
    port = stack.receiver_server.metrics_port
    return scrape_settled(port).total("grpc_server_started_total", grpc_method="Apply")


def test_fifty_approvals_of_one_operation_send_one_apply(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(receiver={"metrics_port": 0})
    op = stack.review().StartReview(start_request(), timeout=10).proposal.operation_id
    check_one_commit(approve_all([stack.review() for _ in range(8)], op, APPROVERS), APPROVERS)
    assert _apply_calls(stack) == 1
    assert stack.effects("T-1042") == 1


def test_fifty_approvals_across_two_replicas_send_one_apply(make_stack: Callable[..., Stack]) -> None:
    # Two orchestrator servers on one database share nothing in memory: only the attempt lease in
    # the database keeps the second from re-driving while the first one's Apply is in flight.
    stack = make_stack(receiver={"metrics_port": 0})
    first = stack.orchestrator_port
    stack.start_orchestrator()
    second = stack.orchestrator_port
    assert first != second
    stubs = []
    for port in (first, second) * 4:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.enable_retries", 0)])
        stack.channels.append(channel)
        stubs.append(review_pb2_grpc.ReviewServiceStub(channel))
    op = stubs[0].StartReview(start_request(), timeout=10).proposal.operation_id
    check_one_commit(approve_all(stubs, op, APPROVERS), APPROVERS)
    assert _apply_calls(stack) == 1
    assert stack.effects("T-1042") == 1


def test_a_replay_waits_for_a_held_lease_and_drives_once_it_has_passed(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(receiver={"metrics_port": 0})
    op = OperationId(stack.review().StartReview(start_request(), timeout=10).proposal.operation_id)
    engine = db.create_engine(stack.orchestrator_url)
    try:
        # Another replica decided and took the attempt's lease for a minute (its Apply in flight).
        store = OrchestratorStore(engine)
        proposal = store.get_proposal(op)
        now = datetime.now(UTC)
        decision = RecordedDecision(op, Decision.APPROVE, "reviewer-on-another-replica", now)
        store.record_decision(decision, proposal.case_id, [])
        payload, digest = effect_payload(proposal, decision)
        store.record_attempt(op, payload, digest, now, now + timedelta(minutes=1))

        waited = stack.review().Approve(approve(op), timeout=1.5)
        assert (waited.outcome, waited.replay) == (common_pb2.OUTCOME_UNKNOWN, True)
        assert _apply_calls(stack) == 0

        # That replica crashed; its lease passes and the next replay drives the effect.
        with engine.begin() as conn:
            conn.execute(
                operations.update()
                .where(operations.c.operation_id == op)
                .values(attempt_lease_until=now - timedelta(seconds=1))
            )
        driven = stack.review().Approve(approve(op), timeout=10)
        assert (driven.outcome, driven.replay) == (common_pb2.OUTCOME_COMMITTED, True)
        assert _apply_calls(stack) == 1
        assert store.get_operation(op).attempts == 2
    finally:
        engine.dispose()
    assert stack.effects("T-1042") == 1
