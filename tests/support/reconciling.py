"""Reconciler test support: real receivers and orchestrators (in process via make_stack, or as
processes), Unknowns made by real faults, and the reconciler run in process or as its command."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa

from decisionflow.v1 import common_pb2, effect_receiver_pb2, review_pb2
from decisionflow.vocabulary import CaseId, Decision, OperationId
from decisionflow_server.foundation.processes import child_environment, free_port
from decisionflow_server.storage import db
from effect_receiver.config import ReceiverConfig
from effect_receiver.main import create_server as create_receiver
from effect_receiver.store import migrate as migrate_receiver
from orchestrator.domain import RecordedDecision
from orchestrator.schema import operations
from orchestrator.store import OrchestratorStore
from reconciler.config import ReconcilerConfig
from reconciler.domain import PassSummary
from reconciler.main import build_reconciler, open_channels
from tests.support.stack import Stack, approve, start_request

ROOT = Path(__file__).resolve().parents[2]
LOST_REPLY = "receiver.commit_then_lose_reply=raise"
AFTER_ATTEMPT = "orchestrator.after_attempt=raise"
AFTER_DECISION = "orchestrator.after_decision=raise"


def start_receiver(stack: Stack, **config: Any) -> int:
    """Start another in-process receiver on the stack's loop (stopped with the stack); return its port."""
    base = ReceiverConfig(address="127.0.0.1:0", database_url=stack.receiver_url)
    server = stack.loop.run(create_receiver(replace(base, **config)))
    stack.servers.insert(0, server)  # stopped after the orchestrators, like the stack's own receiver
    return int(server.port)


def lagging_replica(tmp_path: Path) -> str:
    """An empty, migrated receiver database: a replica that has seen none of the primary's writes."""
    url = f"sqlite:///{tmp_path / 'replica.db'}"
    engine = db.create_engine(url, pool_size=1)
    try:
        migrate_receiver(engine)
    finally:
        engine.dispose()
    return url


def closed_port() -> int:
    """A loopback port nothing listens on (free a moment ago)."""
    return free_port()


def reconciler_config(stack: Stack, *, receiver_port: int | None = None, **overrides: Any) -> ReconcilerConfig:
    """A --once configuration aimed at the stack's orchestrator and receiver (or receiver_port)."""
    config = ReconcilerConfig(
        orchestrator_target=f"127.0.0.1:{stack.orchestrator_port}",
        receiver_target=f"127.0.0.1:{receiver_port or stack.receiver_port}",
        grace_seconds=0,
        timeout_seconds=5,
    )
    return replace(config, **overrides)


def reconcile(stack: Stack, *, receiver_port: int | None = None, **overrides: Any) -> PassSummary:
    """Run one pass in process, wired exactly as the command wires it."""
    config = reconciler_config(stack, receiver_port=receiver_port, **overrides)
    with open_channels(config) as (orchestrator, receiver), build_reconciler(config, orchestrator, receiver) as r:
        return r.run_pass()


def new_proposal(stack: Stack, case_id: str) -> str:
    """Start a review for case_id; return its operation id."""
    return str(stack.review().StartReview(start_request(case_id=case_id), timeout=10).proposal.operation_id)


def approve_unknown(stack: Stack, case_id: str) -> str:
    """Approve a new proposal through a receiver that commits and loses its replies: the outcome is Unknown."""
    op = new_proposal(stack, case_id)
    # The Approve deadline bounds the orchestrator's own retries, each of which also loses its reply.
    try:
        answer = stack.review().Approve(approve(op), timeout=2)
    except grpc.RpcError as error:
        # On a busy machine the Unknown reply itself may miss the deadline: the caller knows as little.
        assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED, error
    else:
        assert answer.outcome == common_pb2.OUTCOME_UNKNOWN
    assert operation(stack, op).state == common_pb2.OPERATION_STATE_UNKNOWN
    return op


def approve_and_crash(stack: Stack, case_id: str) -> str:
    """Approve a new proposal through an orchestrator whose failpoint raises in the commit step."""
    op = new_proposal(stack, case_id)
    with pytest.raises(grpc.RpcError):
        stack.review().Approve(approve(op), timeout=10)
    return op


def approved_never_attempted(stack: Stack, case_id: str) -> str:
    """A new proposal approved as an orchestrator before revision 0002 left it when it crashed between its
    decision and its first attempt (two transactions then; one now): APPROVED, never attempted."""
    op = new_proposal(stack, case_id)
    engine = db.create_engine(stack.orchestrator_url, pool_size=1)
    try:
        store = OrchestratorStore(engine)
        decision = RecordedDecision(OperationId(op), Decision.APPROVE, "reviewer@example.com", datetime.now(UTC))
        store.record_decision(decision, CaseId(case_id), [])
    finally:
        engine.dispose()
    return op


def operation(stack: Stack, op: str) -> review_pb2.Operation:
    """The operation as the orchestrator reports it."""
    return stack.review().GetOperation(review_pb2.GetOperationRequest(operation_id=op), timeout=5).operation


def lookup(stack: Stack, op: str) -> effect_receiver_pb2.LookupResult:
    """The stack receiver's (strong) lookup of op."""
    return stack.receiver().Lookup(effect_receiver_pb2.LookupRequest(operation_id=op), timeout=5).result


def age_first_attempt(orchestrator_url: str, op: str, by: timedelta) -> None:
    """Move an operation's first attempt (and state change) back by the given time, as if it were older."""
    engine = db.create_engine(orchestrator_url, pool_size=1)
    try:
        with engine.begin() as conn:
            where = operations.c.operation_id == op
            first = conn.execute(sa.select(operations.c.first_attempt_at).where(where)).scalar_one()
            earlier = first - by
            conn.execute(operations.update().where(where).values(first_attempt_at=earlier, state_changed_at=earlier))
    finally:
        engine.dispose()


@dataclass(frozen=True)
class CommandRun:
    """One run of decisionflow-reconciler: exit status, output, and the --json summary if printed."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> dict[str, Any]:
        """The JSON summary (the last stdout line)."""
        return dict(json.loads(self.stdout.strip().splitlines()[-1]))


def reconciler_command(args: Sequence[str]) -> list[str]:
    """argv running the reconciler command with this interpreter."""
    return [sys.executable, "-m", "reconciler.main", *args]


def run_reconciler(args: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 120) -> CommandRun:
    """Run decisionflow-reconciler (as python -m reconciler.main) to completion."""
    done = subprocess.run(
        reconciler_command(args),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
        env=child_environment(env),
    )
    return CommandRun(done.returncode, done.stdout, done.stderr)


def count(url: str, sql: str, **params: Any) -> int:
    """Run a count query on a fresh engine."""
    engine = db.create_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(sql), params).scalar_one())
    finally:
        engine.dispose()
