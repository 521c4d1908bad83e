"""Escalation seen through a real orchestrator over gRPC, on SQLite and PostgreSQL: a member of the stage's
escalation group is refused NOT_ELIGIBLE_TO_DECIDE while the stage is not escalated, and admitted once the
review timer (its run-once, at a clock set past the stage's due time) has escalated it; the review's
progress then says escalated, and the timer's metrics count the escalation and the overdue review."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, review_pb2
from decisionflow.vocabulary import Role
from decisionflow_server.storage import db
from orchestrator.metrics import OrchestratorMetrics
from orchestrator.review_timer import ReviewTimer
from orchestrator.store import OrchestratorStore
from tests.support.rules_desk import ESCALATING, open_desk, with_deadline

PEOPLE = {
    "ava": ([Role.AUTHOR], []),
    "oli": ([Role.REVIEWER], ["on-call-leads"]),
    "lee": ([Role.REVIEWER], ["support-leads"]),
}


def test_an_escalation_group_member_is_refused_before_the_escalation_and_admitted_after(
    database_url: str, tmp_path: Path
) -> None:
    now = [datetime(2026, 12, 21, 9, 0, tzinfo=UTC)]
    rules = with_deadline(ESCALATING, "3d")
    engine = db.create_engine(database_url)
    try:
        with open_desk(tmp_path, PEOPLE, rules, orchestrator_url=database_url, clock=lambda: now[0]) as desk:
            op = desk.start("T-1")
            metrics = OrchestratorMetrics()
            timer = ReviewTimer(
                OrchestratorStore(engine),
                lambda: now[0],
                batch=10,
                on_run=lambda run: metrics.record_review_timer(
                    len(run.escalated), len(run.expired), run.overdue, run.oldest_overdue_seconds
                ),
            )

            now[0] += timedelta(hours=3)
            assert asyncio.run(timer.run_once()).escalated == ()
            with pytest.raises(grpc.RpcError) as refused:
                desk.approve("oli", op)
            reason, details, _ = error_info(refused.value)
            assert (refused.value.code(), reason) == (grpc.StatusCode.PERMISSION_DENIED, "NOT_ELIGIBLE_TO_DECIDE")
            assert details.get("vote_refusal") == "not_eligible"

            now[0] += timedelta(hours=2)  # an hour past the stage's due time
            assert asyncio.run(timer.run_once()).escalated == (op,)
            assert metrics.registry.get_sample_value("decisionflow_review_escalations_total") == 1
            assert metrics.registry.get_sample_value("decisionflow_reviews_overdue") == 1
            assert metrics.registry.get_sample_value("decisionflow_review_oldest_overdue_seconds") == 3600
            read = desk.call("lee", "GetOperation", review_pb2.GetOperationRequest(operation_id=op))
            assert read.operation.progress.escalated
            assert list(read.operation.progress.eligible_groups) == ["on-call-leads", "support-leads"]

            admitted = desk.approve("oli", op)
            assert admitted.outcome == common_pb2.OUTCOME_COMMITTED
            assert admitted.operation.state == common_pb2.OPERATION_STATE_COMMITTED
            assert desk.stack.effects() == 1
    finally:
        engine.dispose()
