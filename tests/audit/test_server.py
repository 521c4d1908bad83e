"""The sequencer as a job of the running orchestrator: a StartReview and an Approve through gRPC are in the
log and under a signed checkpoint within a few intervals, with the gauges saying so; without a signing key
the log is sequenced, nothing is signed and start-up says so once; an interval of 0 runs no job."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from decisionflow.transparency import DecisionLeaf, EffectLeaf, ProposalLeaf, SettlementLeaf, decode_leaf
from decisionflow.v1 import common_pb2, effect_receiver_pb2, operations_pb2
from decisionflow.vocabulary import OperationId
from decisionflow_server.storage import db
from orchestrator.audit_log.progress import AuditStatus
from orchestrator.metrics import AuditCollector
from orchestrator.store import OrchestratorStore
from tests.metrics.scrape import scrape
from tests.support.audit import ORIGIN, SIGNER, check_log, entries
from tests.support.stack import Stack, approve, start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def _wait_for(condition: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.05)


def _signed_size(store: OrchestratorStore) -> int:
    latest = store.latest_checkpoint()
    return -1 if latest is None else latest.size


def test_an_approval_is_logged_sequenced_and_signed_by_the_running_server(make_stack: Callable[..., Stack]) -> None:
    began = time.time()
    stack = make_stack(audit_signer=SIGNER, audit_interval_seconds=0.1, metrics_port=0)
    review = stack.review()
    op = review.StartReview(start_request(), timeout=10).proposal.operation_id
    assert review.Approve(approve(op), timeout=30).outcome == common_pb2.OUTCOME_COMMITTED

    engine = db.create_engine(stack.orchestrator_url, pool_size=1)
    try:
        store = OrchestratorStore(engine)
        _wait_for(lambda: _signed_size(store) == 3)
        latest = store.latest_checkpoint()
        assert latest is not None
        assert check_log(store, [latest], SIGNER.vkey, ORIGIN) == 3
        kinds = [type(decode_leaf(leaf.data)) for leaf in store.leaves(0, 10)]
        assert kinds == [ProposalLeaf, DecisionLeaf, EffectLeaf]
        assert store.leaf_indices(operation_id=OperationId(op)) == [0, 1, 2]
    finally:
        engine.dispose()

    port = stack.servers[-1].metrics_port
    assert port
    _wait_for(lambda: scrape(port).value("decisionflow_audit_checkpoint_size") == 3)
    seen = scrape(port)
    assert seen.value("decisionflow_audit_sequenced_leaves") == 3
    assert seen.value("decisionflow_audit_unsequenced_entries") == 0
    assert seen.value("decisionflow_audit_oldest_unsequenced_age_seconds") == 0
    assert seen.value("decisionflow_audit_unsigned_age_seconds") == 0
    # The checkpoint was signed after the test began (its time kept to the second at worst).
    assert 0 <= seen.value("decisionflow_audit_checkpoint_age_seconds") <= time.time() - began + 1


def test_a_settlement_through_grpc_is_logged_with_the_calling_principal(make_stack: Callable[..., Stack]) -> None:
    # Every Apply commits and loses its reply: the Approve ends UNKNOWN, and a lookup settles it.
    stack = make_stack(receiver_failpoints="receiver.commit_then_lose_reply=raise", receiver_timeout_seconds=1.0)
    review = stack.review()
    op = review.StartReview(start_request(), timeout=10).proposal.operation_id
    assert review.Approve(approve(op), timeout=10).outcome == common_pb2.OUTCOME_UNKNOWN
    found = stack.receiver().Lookup(effect_receiver_pb2.LookupRequest(operation_id=op), timeout=5).result
    assert found.status == common_pb2.LOOKUP_STATUS_APPLIED
    settlement = operations_pb2.Settlement(
        operation_id=op, status=found.status, consistency=found.consistency, receipt=found.receipt
    )
    settled = stack.operations().SettleOperation(operations_pb2.SettleOperationRequest(settlement=settlement))
    assert settled.settled and settled.operation.state == common_pb2.OPERATION_STATE_COMMITTED

    engine = db.create_engine(stack.orchestrator_url, pool_size=1)
    try:
        leaves = [row.leaf for row in entries(OrchestratorStore(engine))]
    finally:
        engine.dispose()
    assert [type(leaf) for leaf in leaves] == [ProposalLeaf, DecisionLeaf, SettlementLeaf]
    settled_leaf = leaves[-1]
    assert isinstance(settled_leaf, SettlementLeaf)
    # No credentials on this stack: every caller is the anonymous principal, and the leaf says so.
    assert (settled_leaf.operation_id, settled_leaf.state, settled_leaf.principal) == (op, "COMMITTED", "anonymous")


def test_without_a_key_the_server_sequences_signs_nothing_and_says_so_once(
    make_stack: Callable[..., Stack], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="decisionflow.orchestrator"):
        stack = make_stack(audit_interval_seconds=0.1, metrics_port=0)
    said = [r for r in caplog.records if "audit log" in r.getMessage()]
    assert len(said) == 1 and "no --audit-signing-key-file" in said[0].getMessage()
    assert said[0].levelno == logging.INFO  # a log without checkpoints is a choice, not a fault
    review = stack.review()
    review.StartReview(start_request(), timeout=10)
    port = stack.servers[-1].metrics_port
    assert port
    _wait_for(lambda: scrape(port).value("decisionflow_audit_sequenced_leaves") == 1)
    seen = scrape(port)
    assert seen.value("decisionflow_audit_checkpoint_size") == 0
    assert "decisionflow_audit_checkpoint_age_seconds" not in seen.names
    assert "decisionflow_audit_unsigned_age_seconds" not in seen.names  # only a signer reports it


def test_an_interval_of_zero_leaves_sequencing_to_the_command(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(audit_signer=SIGNER, audit_interval_seconds=0, metrics_port=0)
    stack.review().StartReview(start_request(), timeout=10)
    time.sleep(0.5)
    port = stack.servers[-1].metrics_port
    assert port
    seen = scrape(port)
    assert (
        seen.value("decisionflow_audit_unsequenced_entries"),
        seen.value("decisionflow_audit_sequenced_leaves"),
    ) == (
        1,
        0,
    )
    assert seen.value("decisionflow_audit_oldest_unsequenced_age_seconds") > 0


def test_the_gauges_age_from_the_events_and_the_signature_the_database_records() -> None:
    t0 = datetime(2026, 12, 14, 9, 0, tzinfo=UTC)
    status = AuditStatus(
        unsequenced=4,
        oldest_unsequenced_at=t0,
        size=10,
        checkpoint_size=7,
        checkpoint_signed_at=t0 - timedelta(minutes=5),
        oldest_unsigned_at=t0 - timedelta(minutes=2),
    )
    registry = CollectorRegistry()
    registry.register(AuditCollector(lambda: status, lambda: t0 + timedelta(seconds=30), signing=True))
    assert registry.get_sample_value("decisionflow_audit_unsequenced_entries") == 4
    assert registry.get_sample_value("decisionflow_audit_oldest_unsequenced_age_seconds") == 30
    assert registry.get_sample_value("decisionflow_audit_sequenced_leaves") == 10
    assert registry.get_sample_value("decisionflow_audit_checkpoint_size") == 7
    assert registry.get_sample_value("decisionflow_audit_checkpoint_age_seconds") == 330
    assert registry.get_sample_value("decisionflow_audit_unsigned_age_seconds") == 150
