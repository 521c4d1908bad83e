"""Test stacks: a real receiver and a real orchestrator, in process or as processes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa

from decisionflow.v1 import common_pb2, effect_receiver_pb2_grpc, operations_pb2_grpc, review_pb2, review_pb2_grpc
from decisionflow_demo.launch import (
    CHECKPOINT_KEYS_ENV,
    ORCHESTRATOR_MODULE,
    RECEIVER_MODULE,
    orchestrator_args,
    receiver_args,
)
from decisionflow_server.foundation.processes import ServiceProcess, spawn
from decisionflow_server.storage import db
from effect_receiver.config import ReceiverConfig
from effect_receiver.main import create_server as create_receiver
from orchestrator.config import OrchestratorConfig
from orchestrator.main import create_server as create_orchestrator
from tests.support.audit_log import InMemoryAuditLog
from tests.support.servers import LoopThread

CHECKPOINT_KEY = "k" * 32
T1042_BODY = (
    "Thanks for the report. This is a known firmware issue (HOLD-7); "
    "please update to 4.2.1 and send us the diagnostic export if it happens again."
)


def policy(allowance: int = 9, label: str = "2026-10") -> common_pb2.Policy:
    """The support-replies policy used across the tests."""
    return common_pb2.Policy(name="support-replies", version_label=label, allowance_units=allowance, rules={})


def start_request(
    case_id: str = "T-1042", body: str = T1042_BODY, hold_version: int = 2, allowance: int = 9
) -> review_pb2.StartReviewRequest:
    """A StartReview request for the seed case, with the HOLD-7 source at hold_version."""
    return review_pb2.StartReviewRequest(
        case_id=case_id,
        action="record_support_review",
        body=body,
        evidence=[
            common_pb2.Evidence(source_id="HOLD-7", version=hold_version, quotation="Firmware 4.2.0 may hold."),
            common_pb2.Evidence(source_id="KB-12", version=1, quotation="Update to 4.2.1."),
        ],
        policy=policy(allowance),
    )


def approve(op: str) -> review_pb2.ApproveRequest:
    """An approval of op."""
    return review_pb2.ApproveRequest(operation_id=op, decision=common_pb2.DECISION_APPROVE)


def decline(op: str) -> review_pb2.ApproveRequest:
    """A decline of op."""
    return review_pb2.ApproveRequest(operation_id=op, decision=common_pb2.DECISION_DECLINE)


def approve_all(
    stubs: list[review_pb2_grpc.ReviewServiceStub], op: str, approvers: int
) -> list[review_pb2.ApproveResponse]:
    """Send approvers approvals of op at once, spread over stubs; return every answer."""
    with ThreadPoolExecutor(approvers) as pool:
        futures = [pool.submit(stubs[i % len(stubs)].Approve, approve(op), timeout=30) for i in range(approvers)]
        return [f.result() for f in futures]


def check_one_commit(results: list[review_pb2.ApproveResponse], approvers: int) -> None:
    """Assert approvers answers all COMMITTED, one of them the first (not a replay), with one receipt."""
    assert [r.outcome for r in results] == [common_pb2.OUTCOME_COMMITTED] * approvers
    assert sum(not r.replay for r in results) == 1
    assert len({r.operation.receipt.receipt_id for r in results}) == 1


def count(database_url: str, sql: str) -> int:
    """Run a count query on a fresh engine."""
    engine = db.create_engine(database_url, pool_size=1)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(sql)).scalar_one())
    finally:
        engine.dispose()


@dataclass
class Stack:
    """A receiver and an orchestrator with sync stubs to both."""

    receiver_url: str
    orchestrator_url: str
    loop: LoopThread
    servers: list[Any] = field(default_factory=list)
    channels: list[grpc.Channel] = field(default_factory=list)
    receiver_port: int = 0
    orchestrator_port: int = 0
    receiver_server: Any = None
    # Seconds a stopped server drains calls in flight (0: cut them, as a crash would).
    stop_grace: float = 1.0
    # A fake at the AuditService's seam (tests.support.audit_log), for the servicer's own tests: its
    # orchestrators serve it instead of the store's log. None: the store's real log.
    audit_log: InMemoryAuditLog | None = None

    def fake_audit_log(self) -> InMemoryAuditLog:
        """The fake log this stack's orchestrators serve (the stack must have been given one)."""
        assert self.audit_log is not None, "this stack serves its store's real audit log"
        return self.audit_log

    def review(self) -> review_pb2_grpc.ReviewServiceStub:
        """A ReviewService stub on a fresh channel to the orchestrator."""
        return review_pb2_grpc.ReviewServiceStub(self._channel(self.orchestrator_port))

    def operations(self) -> operations_pb2_grpc.OperationsServiceStub:
        """An OperationsService stub on a fresh channel."""
        return operations_pb2_grpc.OperationsServiceStub(self._channel(self.orchestrator_port))

    def receiver(self) -> effect_receiver_pb2_grpc.EffectReceiverServiceStub:
        """An EffectReceiverService stub."""
        return effect_receiver_pb2_grpc.EffectReceiverServiceStub(self._channel(self.receiver_port))

    def _channel(self, port: int) -> grpc.Channel:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.enable_retries", 0)])
        self.channels.append(channel)
        return channel

    def effects(self, case_id: str | None = None) -> int:
        """Effects stored at the receiver (for one case, if given)."""
        where = f" WHERE case_id = '{case_id}'" if case_id else ""
        return count(self.receiver_url, "SELECT count(*) FROM effects" + where)

    def decisions(self) -> int:
        """Decisions in the orchestrator's ledger."""
        return count(self.orchestrator_url, "SELECT count(*) FROM decisions")

    def start_orchestrator(self, **overrides: Any) -> None:
        """(Re)start the in-process orchestrator on the same database."""
        config = OrchestratorConfig(
            checkpoint_keys=(CHECKPOINT_KEY.encode(),),
            address="127.0.0.1:0",
            database_url=self.orchestrator_url,
            receiver_target=f"127.0.0.1:{self.receiver_port}",
            # No audit sequencer beside the calls unless a test asks for one (audit_interval_seconds=...):
            # its own reads of the database would join the log lines and counts other tests assert.
            audit_interval_seconds=0,
            # Nor the review timer (review_timer_interval_seconds=...): tests drive it with their own clock.
            review_timer_interval_seconds=0,
        )
        kwargs: dict[str, Any] = {
            k: overrides.pop(k) for k in ("workflow", "effects", "clock", "monotonic") if k in overrides
        }
        if self.audit_log is not None:
            kwargs["audit_log"] = self.audit_log
        server = self.loop.run(create_orchestrator(replace(config, **overrides), **kwargs))
        self.servers.append(server)
        self.orchestrator_port = server.port

    def stop_orchestrator(self) -> None:
        """Stop the newest in-process orchestrator."""
        server = self.servers.pop()
        self.loop.run(server.stop(self.stop_grace))

    def start_receiver(self, failpoints: str = "", **overrides: Any) -> None:
        """(Re)start the in-process receiver on the same database with ReceiverConfig overrides (as
        start_orchestrator takes OrchestratorConfig ones); orchestrators started later dial it."""
        if self.receiver_server is not None:
            self.loop.run(self.receiver_server.stop(self.stop_grace))
        config = ReceiverConfig(address="127.0.0.1:0", database_url=self.receiver_url, failpoints=failpoints)
        self.receiver_server = self.loop.run(create_receiver(replace(config, **overrides)))
        self.receiver_port = self.receiver_server.port

    def close(self) -> None:
        """Stop everything."""
        for channel in self.channels:
            channel.close()
        for server in reversed(self.servers):
            self.loop.run(server.stop(self.stop_grace))
        if self.receiver_server is not None:
            self.loop.run(self.receiver_server.stop(self.stop_grace))
        self.loop.close()


def open_stack(
    directory: Path,
    orchestrator_url: str | None = None,
    receiver_failpoints: str = "",
    *,
    receiver_url: str | None = None,
    receiver: dict[str, Any] | None = None,
    audit_log: InMemoryAuditLog | None = None,
    **orchestrator: Any,
) -> Stack:
    """Start an in-process stack (databases by default SQLite files in directory) that the caller closes;
    the arguments as make_stack takes them."""
    stack = Stack(
        receiver_url or f"sqlite:///{directory / 'receiver.db'}",
        orchestrator_url or f"sqlite:///{directory / 'orchestrator.db'}",
        LoopThread(),
        audit_log=audit_log,
    )
    try:
        stack.start_receiver(receiver_failpoints, **(receiver or {}))
        stack.start_orchestrator(**orchestrator)
    except BaseException:
        stack.close()
        raise
    return stack


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Build in-process stacks: make_stack(orchestrator_url=..., receiver_url=..., receiver_failpoints=...,
    receiver={ReceiverConfig overrides}, audit_log=a fake log to serve, **OrchestratorConfig overrides)."""
    stacks: list[Stack] = []

    def make(*args: Any, **kwargs: Any) -> Stack:
        stack = open_stack(tmp_path, *args, **kwargs)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.close()


def spawn_receiver(workdir: Path, database_url: str, failpoints: str = "", name: str = "receiver") -> ServiceProcess:
    """Start a receiver process."""
    return spawn(RECEIVER_MODULE, receiver_args(database_url, failpoints=failpoints), workdir, name)


def spawn_orchestrator(
    workdir: Path,
    database_url: str,
    receiver: ServiceProcess,
    name: str,
    failpoints: str = "",
    extra: Sequence[str] = (),
) -> ServiceProcess:
    """Start an orchestrator process (extra: more of its flags)."""
    return spawn(
        ORCHESTRATOR_MODULE,
        orchestrator_args(database_url, receiver.target, failpoints=failpoints, extra=extra),
        workdir,
        name,
        env={CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY},
    )


def digest(text: str) -> str:
    """SHA-256 hex of text."""
    return hashlib.sha256(text.encode()).hexdigest()
