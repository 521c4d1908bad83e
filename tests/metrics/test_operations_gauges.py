"""decisionflow_operations and decisionflow_oldest_unknown_age_seconds come from the orchestrator's
own database at scrape time: an Unknown left by a lost reply shows there, aged from its decision,
and a scrape storm reads the database once per cache period."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from decisionflow.v1 import common_pb2
from decisionflow.vocabulary import OperationId, OperationState
from decisionflow_server.storage import db
from orchestrator.domain import OperationTally
from orchestrator.metrics import OperationsCollector
from orchestrator.store import OrchestratorStore, migrate
from tests.metrics.scrape import scrape_settled
from tests.support.seeding import seed_operations
from tests.support.stack import Stack, approve, start_request

LOST_REPLY = "receiver.commit_then_lose_reply=raise"


def test_an_unknown_shows_in_the_gauges_read_from_the_database(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(receiver_failpoints=LOST_REPLY, receiver_timeout_seconds=1.0, metrics_port=0)
    port = stack.servers[-1].metrics_port
    assert port
    review = stack.review()
    op = review.StartReview(start_request(), timeout=10).proposal.operation_id
    assert review.Approve(approve(op), timeout=10).outcome == common_pb2.OUTCOME_UNKNOWN

    seen = scrape_settled(port)
    assert seen.value("decisionflow_operations", state="UNKNOWN") == 1
    assert seen.value("decisionflow_operations", state="COMMITTED") == 0
    assert seen.value("decisionflow_oldest_unknown_age_seconds") > 0
    assert seen.value("decisionflow_approvals_total", outcome="unknown", replay="false") == 1
    assert seen.value("decisionflow_receiver_call_seconds_count", result="indeterminate") == 1
    assert seen.value("decisionflow_receiver_call_seconds_count", result="committed") == 0

    # The age runs from the decision recorded in the database, whatever the scraping clock.
    engine = db.create_engine(stack.orchestrator_url, pool_size=1)
    try:
        store = OrchestratorStore(engine)
        decision = store.get_decision(OperationId(op))
        tally = store.tally()
        assert decision is not None and tally.by_state[OperationState.UNKNOWN] == 1
        assert tally.oldest_open_decided_at == decision.decided_at
        registry = CollectorRegistry()
        registry.register(OperationsCollector(store.tally, lambda: decision.decided_at + timedelta(minutes=10)))
        assert registry.get_sample_value("decisionflow_oldest_unknown_age_seconds") == 600.0
        assert registry.get_sample_value("decisionflow_operations", {"state": "UNKNOWN"}) == 1
    finally:
        engine.dispose()


def test_superseded_proposals_are_counted_apart_from_pending_ones(
    make_stack: Callable[..., Stack], database_url: str
) -> None:
    stack = make_stack(orchestrator_url=database_url, metrics_port=0)
    review = stack.review()
    first = review.StartReview(start_request(case_id="T-1"), timeout=10).proposal.operation_id
    newer = start_request(case_id="T-1", hold_version=3)
    newer.expected_operation_id = first  # replaces the open proposal, which is then superseded
    review.StartReview(newer, timeout=10)
    seen = scrape_settled(stack.servers[-1].metrics_port or 0)
    assert seen.value("decisionflow_operations", state="PENDING_REVIEW") == 1
    assert seen.value("decisionflow_operations", state="SUPERSEDED") == 1


class _CountingTally:
    def __init__(self, tally: OperationTally | None = None) -> None:
        self.reads = 0
        self.tally = tally
        self.clock = 0.0

    def __call__(self) -> OperationTally:
        self.reads += 1
        if self.tally is None:
            raise ConnectionError("database unavailable")
        return self.tally


def test_scrapes_within_the_cache_period_read_the_database_once() -> None:
    counting = _CountingTally(OperationTally(dict.fromkeys(OperationState, 0), None))
    registry = CollectorRegistry()
    registry.register(OperationsCollector(counting, _never, cache_seconds=2.0, monotonic=lambda: counting.clock))
    for _ in range(10):
        generate_latest(registry)
    assert counting.reads == 1
    counting.clock = 2.5
    generate_latest(registry)
    assert counting.reads == 2


def _never() -> datetime:
    raise AssertionError("no open operation: the clock is not needed")


def test_a_database_that_cannot_be_read_leaves_the_gauges_out_not_the_scrape(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    registry.register(OperationsCollector(_CountingTally(None), _never))
    text = generate_latest(registry).decode()
    assert "decisionflow_operations" not in text
    assert "decisionflow_oldest_unknown_age_seconds" not in text
    assert "cannot read the operations for metrics" in caplog.text


def test_the_tally_counts_states_and_finds_the_oldest_open_decision(database_url: str) -> None:
    oldest = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    seed_operations(database_url, 3, state=OperationState.UNKNOWN, decided_at=oldest + timedelta(milliseconds=2))
    seed_operations(database_url, 2, state=OperationState.APPROVED, decided_at=oldest + timedelta(hours=1))
    engine = db.create_engine(database_url, pool_size=1)
    try:
        tally = OrchestratorStore(engine).tally()
    finally:
        engine.dispose()
    assert tally.by_state[OperationState.UNKNOWN] == 3
    assert tally.by_state[OperationState.APPROVED] == 2
    assert sum(tally.by_state.values()) == 5
    assert tally.oldest_open_decided_at == oldest  # the first of the three, 2 ms before the last


def test_an_empty_database_tallies_zero_everywhere(database_url: str) -> None:
    engine = db.create_engine(database_url, pool_size=1)
    try:
        migrate(engine)
        tally = OrchestratorStore(engine).tally()
    finally:
        engine.dispose()
    assert set(tally.by_state) == set(OperationState)
    assert not any(tally.by_state.values())
    assert tally.oldest_open_decided_at is None
