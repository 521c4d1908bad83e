"""SIGTERM reaches an orchestrator process while twenty StartReview and Approve calls are in
flight, held up by locked databases. Health turns NOT_SERVING, new calls are refused, each call in
flight completes or ends UNAVAILABLE/CANCELLED, the process exits 0 within its grace period, and
the databases hold no half-written state: whether the locks clear during the drain or outlast it."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from grpc_health.v1 import health_pb2, health_pb2_grpc

from decisionflow.v1 import common_pb2, review_pb2, review_pb2_grpc
from decisionflow_server.storage import db
from effect_receiver.config import ReceiverConfig
from effect_receiver.main import create_server as create_receiver
from tests.security.contract import apply_request
from tests.support.servers import LoopThread, ServiceProcess, spawn
from tests.support.stack import CHECKPOINT_KEY, approve, start_request

pytestmark = pytest.mark.slow

IN_FLIGHT = 10  # of each kind: StartReview and Approve
CLEAN_ENDINGS = {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
EXIT_MARGIN_SECONDS = 1.5  # interpreter shutdown after the drain, on a loaded machine


@contextmanager
def _receiver(database: Path) -> Iterator[str]:
    """A receiver in this process (its database is the one locked), serving until the block ends."""
    loop = LoopThread()
    server = loop.run(create_receiver(ReceiverConfig(address="127.0.0.1:0", database_url=f"sqlite:///{database}")))
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        loop.run(server.stop(1.0))
        loop.close()


def _spawn_orchestrator(workdir: Path, database: Path, receiver: str, grace: float) -> ServiceProcess:
    return spawn(
        "orchestrator.main",
        [
            *("--address", "127.0.0.1:0", "--database-url", f"sqlite:///{database}"),
            *("--receiver-target", receiver, "--shutdown-grace-seconds", str(grace)),
        ],
        workdir,
        "orchestrator",
        env={"DECISIONFLOW_CHECKPOINT_KEYS": CHECKPOINT_KEY},
    )


@contextmanager
def _write_locked(database: Path) -> Iterator[sqlite3.Connection]:
    """Hold SQLite's write lock on database until the block ends (or the caller rolls back)."""
    connection = sqlite3.connect(database, isolation_level=None, timeout=10)
    try:
        connection.execute("BEGIN IMMEDIATE")
        yield connection
    finally:
        if connection.in_transaction:
            connection.rollback()
        connection.close()


def _call(method: Any, request: object) -> tuple[grpc.StatusCode, object]:
    try:
        return grpc.StatusCode.OK, method(request, timeout=30)
    except grpc.RpcError as error:
        return error.code(), None


def _rows(database: Path, sql: str) -> list[Any]:
    engine = db.create_engine(f"sqlite:///{database}", pool_size=1)
    try:
        with db.reading(engine) as conn:
            return list(conn.execute(sa.text(sql)))
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("grace", "release_after"),
    [(8.0, 1.0), (2.0, None)],
    ids=["locks clear during the drain", "locks outlast the grace period"],
)
def test_sigterm_with_calls_in_flight_drains_cleanly(tmp_path: Path, grace: float, release_after: float | None) -> None:
    orchestrator_db, receiver_db = tmp_path / "orchestrator.db", tmp_path / "receiver.db"
    with ExitStack() as resources:
        receiver = resources.enter_context(_receiver(receiver_db))
        orchestrator = _spawn_orchestrator(tmp_path, orchestrator_db, receiver, grace)
        resources.callback(orchestrator.kill)
        channel = grpc.insecure_channel(orchestrator.target, options=[("grpc.enable_retries", 0)])
        resources.callback(channel.close)
        review = review_pb2_grpc.ReviewServiceStub(channel)
        pending = [review.StartReview(start_request(case_id=f"T-40{i:02d}"), timeout=30) for i in range(IN_FLIGHT)]
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=60)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING

        pool = resources.enter_context(ThreadPoolExecutor(2 * IN_FLIGHT + 1))
        orchestrator_lock = resources.enter_context(_write_locked(orchestrator_db))
        receiver_lock = resources.enter_context(_write_locked(receiver_db))
        calls: list[tuple[str, Future[tuple[grpc.StatusCode, object]]]] = []
        for i in range(IN_FLIGHT):
            calls.append(("start", pool.submit(_call, review.StartReview, start_request(case_id=f"T-41{i:02d}"))))
            calls.append(("approve", pool.submit(_call, review.Approve, approve(pending[i].proposal.operation_id))))
        time.sleep(1.0)  # every call reaches the server and waits on a lock
        assert not any(future.done() for _, future in calls)

        orchestrator.process.terminate()
        terminated_at = time.monotonic()
        assert pool.submit(next, watch).result(10).status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()  # an open watch is itself a call in flight: it would hold the drain to its end
        operation_id = pending[0].proposal.operation_id
        late, _ = _call(review.GetOperation, review_pb2.GetOperationRequest(operation_id=operation_id))
        assert late == grpc.StatusCode.UNAVAILABLE  # the draining server takes no new calls

        if release_after is not None:
            time.sleep(release_after)
            orchestrator_lock.rollback()  # the orchestrator's writers go first, then the receiver's
            time.sleep(0.3)
            receiver_lock.rollback()
        results = [(kind, *future.result(grace + 10)) for kind, future in calls]
        status = orchestrator.process.wait(grace + 15)
        exited_after = time.monotonic() - terminated_at
        # Locks still held until here: whatever the stopped process left running had to give up.
        orchestrator_lock.rollback() if orchestrator_lock.in_transaction else None
        receiver_lock.rollback() if receiver_lock.in_transaction else None

    assert status == 0, orchestrator.stderr()[-3000:]
    assert exited_after < grace + EXIT_MARGIN_SECONDS, exited_after
    assert {code for _, code, _ in results} <= CLEAN_ENDINGS, results
    if release_after is not None:  # released within the grace period: every call finished its work
        assert [code for _, code, _ in results] == [grpc.StatusCode.OK] * len(results)
    _assert_consistent(orchestrator_db, receiver_db, results)


def _assert_consistent(
    orchestrator_db: Path, receiver_db: Path, results: list[tuple[str, grpc.StatusCode, object]]
) -> None:
    operations = {
        row.operation_id: row
        for row in _rows(
            orchestrator_db,
            "SELECT o.operation_id, o.state, o.receipt_id, d.decision, "
            "(SELECT count(*) FROM pending_reviews r WHERE r.operation_id = o.operation_id) AS reviews "
            "FROM operations o LEFT JOIN decisions d USING (operation_id)",
        )
    }
    proposals = {row.operation_id for row in _rows(orchestrator_db, "SELECT operation_id FROM proposals")}
    effects = {
        row.operation_id: row.receipt_id for row in _rows(receiver_db, "SELECT operation_id, receipt_id FROM effects")
    }

    assert set(operations) == proposals  # no proposal without its operation, nor the reverse
    for operation_id, row in operations.items():
        assert row.reviews == 1, operation_id  # ...nor without its pending review
        if row.decision is None:
            assert row.state == "pending_review", (operation_id, row.state)
        else:
            assert row.state in ("approved", "unknown", "committed", "declined"), (operation_id, row.state)
        if row.state == "committed":
            assert row.receipt_id is not None and effects.get(operation_id) == row.receipt_id, operation_id
    # An effect exists only for an approval whose attempt was recorded first.
    assert set(effects) <= {op for op, row in operations.items() if row.state in ("unknown", "committed")}

    for kind, code, answer in results:
        if code is not grpc.StatusCode.OK:
            continue
        if kind == "start":
            assert isinstance(answer, review_pb2.StartReviewResponse)
            assert answer.proposal.operation_id in proposals
        else:
            assert isinstance(answer, review_pb2.ApproveResponse)
            assert answer.outcome == common_pb2.OUTCOME_COMMITTED
            row = operations[answer.operation.operation_id]
            assert (row.state, row.receipt_id) == ("committed", answer.operation.receipt.receipt_id)


def test_receiver_exits_within_its_grace_period_while_writes_wait_on_a_lock(tmp_path: Path) -> None:
    database = tmp_path / "receiver.db"
    grace = 1.0
    receiver = spawn(
        "effect_receiver.main",
        ["--address", "127.0.0.1:0", "--database-url", f"sqlite:///{database}", "--shutdown-grace-seconds", str(grace)],
        tmp_path,
        "receiver",
    )
    channel = grpc.insecure_channel(receiver.target, options=[("grpc.enable_retries", 0)])
    try:
        apply = channel.unary_unary(
            "/decisionflow.v1.EffectReceiverService/Apply", request_serializer=None, response_deserializer=None
        )
        with ThreadPoolExecutor(IN_FLIGHT) as pool, _write_locked(database):
            requests = [
                apply_request(operation_id=f"op-v1-{i:064x}", case_id="T-5000").SerializeToString()
                for i in range(IN_FLIGHT)
            ]
            calls = [pool.submit(_call, apply, request) for request in requests]
            time.sleep(1.0)
            assert not any(call.done() for call in calls)
            receiver.process.terminate()
            terminated_at = time.monotonic()
            status = receiver.process.wait(grace + 15)
            exited_after = time.monotonic() - terminated_at
            codes = {call.result(10)[0] for call in calls}
        assert status == 0, receiver.stderr()[-3000:]
        assert exited_after < grace + EXIT_MARGIN_SECONDS, exited_after
        assert codes <= CLEAN_ENDINGS - {grpc.StatusCode.OK}
        # Every write that waited was abandoned whole: nothing half written, nothing at all.
        assert _rows(database, "SELECT count(*) AS n FROM effects")[0].n == 0
        assert _rows(database, "SELECT count(*) AS n FROM support_review_records")[0].n == 0
    finally:
        channel.close()
        receiver.kill()
