"""The orchestrator's database goes away under a running server: PostgreSQL refusing connections,
dropped, or its connections terminated mid-call; a SQLite file replaced by a directory or its
directory moved away or locked. StartReview, Approve and GetOperation then answer UNAVAILABLE
(retry with the same key), never INTERNAL or UNKNOWN, and never OK for something not committed."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from psycopg import sql

from decisionflow.v1 import common_pb2, review_pb2
from tests.security.dbstate import snapshot
from tests.support.servers import LoopThread
from tests.support.stack import Stack, approve, count, start_request

CALLS = ("StartReview", "Approve", "GetOperation")


def _stack(orchestrator_url: str, directory: Path) -> Stack:
    stack = Stack(f"sqlite:///{directory / 'receiver.db'}", orchestrator_url, LoopThread())
    try:
        stack.start_receiver()
        stack.start_orchestrator()
    except BaseException:
        stack.close()
        raise
    return stack


@pytest.fixture
def postgres_stack(postgres_url: str, tmp_path: Path) -> Iterator[tuple[Stack, str]]:
    """A receiver on SQLite and an orchestrator on a fresh PostgreSQL database."""
    stack = _stack(postgres_url, tmp_path)
    try:
        yield stack, postgres_url
    finally:
        stack.close()


def _admin(url: str) -> psycopg.Connection[Any]:
    """An autocommit session on the server of url, in its maintenance database."""
    return psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True)


def _alter(url: str, statement: str) -> None:
    """Run statement ("ALTER DATABASE {} ..." or the like) on url's database, named safely."""
    with _admin(url) as admin:
        admin.execute(sql.SQL(statement).format(sql.Identifier(url.rsplit("/", 1)[1])))


def _terminate_sessions(url: str) -> None:
    with _admin(url) as admin:
        name = url.rsplit("/", 1)[1]
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))


def _codes(stack: Stack, operation_id: str) -> dict[str, grpc.StatusCode]:
    review = stack.review()
    calls: dict[str, Callable[[], object]] = {
        "StartReview": lambda: review.StartReview(start_request(case_id="T-2001"), timeout=10),
        "Approve": lambda: review.Approve(approve(operation_id), timeout=10),
        "GetOperation": lambda: review.GetOperation(
            review_pb2.GetOperationRequest(operation_id=operation_id), timeout=10
        ),
    }
    codes = {}
    for name, call in calls.items():
        try:
            call()
            codes[name] = grpc.StatusCode.OK
        except grpc.RpcError as error:
            codes[name] = error.code()
    return codes


def _begin(stack: Stack) -> str:
    return str(stack.review().StartReview(start_request(), timeout=15).proposal.operation_id)


@pytest.mark.postgres
def test_postgres_refusing_connections_answers_unavailable_then_recovers(
    postgres_stack: tuple[Stack, str],
) -> None:
    stack, url = postgres_stack
    operation_id = _begin(stack)
    before = snapshot(url)
    _alter(url, "ALTER DATABASE {} ALLOW_CONNECTIONS false")
    try:
        _terminate_sessions(url)
        assert _codes(stack, operation_id) == dict.fromkeys(CALLS, grpc.StatusCode.UNAVAILABLE)
    finally:
        _alter(url, "ALTER DATABASE {} ALLOW_CONNECTIONS true")
    assert snapshot(url) == before  # UNAVAILABLE here means nothing was committed
    assert stack.effects() == 0
    # Once the database is back, the same calls succeed: nothing was left half done.
    answer = stack.review().Approve(approve(operation_id), timeout=15)
    assert answer.outcome == common_pb2.OUTCOME_COMMITTED
    assert stack.effects() == 1


@pytest.mark.postgres
def test_postgres_database_dropped_answers_unavailable(postgres_stack: tuple[Stack, str]) -> None:
    stack, url = postgres_stack
    operation_id = _begin(stack)
    _alter(url, "DROP DATABASE {} WITH (FORCE)")
    assert _codes(stack, operation_id) == dict.fromkeys(CALLS, grpc.StatusCode.UNAVAILABLE)
    assert stack.effects() == 0


@pytest.mark.postgres
def test_postgres_sessions_terminated_mid_call_answer_ok_only_for_committed_work(
    postgres_stack: tuple[Stack, str],
) -> None:
    stack, url = postgres_stack
    review = stack.review()
    pending = [review.StartReview(start_request(case_id=f"T-30{i:02d}"), timeout=15) for i in range(8)]
    stop = threading.Event()

    def terminate_until_stopped() -> None:
        while not stop.is_set():
            _terminate_sessions(url)
            time.sleep(0.05)

    def start(index: int) -> tuple[str, grpc.StatusCode, object]:
        try:
            return (
                "start",
                grpc.StatusCode.OK,
                review.StartReview(start_request(case_id=f"T-31{index:02d}"), timeout=15),
            )
        except grpc.RpcError as error:
            return "start", error.code(), None

    def decide(index: int) -> tuple[str, grpc.StatusCode, object]:
        operation_id = pending[index].proposal.operation_id
        try:
            return "approve", grpc.StatusCode.OK, review.Approve(approve(operation_id), timeout=15)
        except grpc.RpcError as error:
            return "approve", error.code(), None

    killer = threading.Thread(target=terminate_until_stopped, daemon=True)
    killer.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(start, range(8))) + list(pool.map(decide, range(8)))
    finally:
        stop.set()
        killer.join(10)

    assert {code for _, code, _ in results} <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}, results
    for kind, code, answer in results:
        if code is not grpc.StatusCode.OK:
            continue
        if kind == "start":
            assert isinstance(answer, review_pb2.StartReviewResponse)
            operation_id = answer.proposal.operation_id
            assert count(url, f"SELECT count(*) FROM proposals WHERE operation_id = '{operation_id}'") == 1
            assert count(url, f"SELECT count(*) FROM pending_reviews WHERE operation_id = '{operation_id}'") == 1
        else:
            assert isinstance(answer, review_pb2.ApproveResponse)
            operation_id = answer.operation.operation_id
            assert count(url, f"SELECT count(*) FROM decisions WHERE operation_id = '{operation_id}'") == 1
            if answer.outcome == common_pb2.OUTCOME_COMMITTED:
                receipt = answer.operation.receipt.receipt_id
                assert count(url, f"SELECT count(*) FROM operations WHERE receipt_id = '{receipt}'") == 1
    # Every decision, however its call ended, left an operation in a state the reconciler settles.
    assert (
        count(
            url,
            "SELECT count(*) FROM decisions d JOIN operations o USING (operation_id) "
            "WHERE o.state NOT IN ('approved', 'unknown', 'committed')",
        )
        == 0
    )
    assert stack.effects() <= count(url, "SELECT count(*) FROM decisions")
    assert (
        stack.review()
        .GetOperation(review_pb2.GetOperationRequest(operation_id=pending[0].proposal.operation_id), timeout=15)
        .operation.operation_id
        == pending[0].proposal.operation_id
    )


def _waiting_backend(url: str, deadline: float) -> int:
    name = url.rsplit("/", 1)[1]
    with _admin(url) as admin:
        while time.monotonic() < deadline:
            row = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'", (name,)
            ).fetchone()
            if row is not None:
                return int(row[0])
            time.sleep(0.02)
    raise AssertionError("no call came to wait on the locked table")


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("table", "mode"),
    [
        ("checkpoints", "ACCESS EXCLUSIVE"),  # Approve waits to read the pending review's checkpoint
        ("decisions", "SHARE"),  # reads pass; Approve waits to insert the decision
    ],
)
def test_postgres_session_terminated_while_a_call_waits_answers_unavailable(
    postgres_stack: tuple[Stack, str], table: str, mode: str
) -> None:
    stack, url = postgres_stack
    operation_id = _begin(stack)
    review = stack.review()
    # The call waits on the lock at one step of Approve, and its session is terminated there.
    with psycopg.connect(url) as blocker:
        blocker.execute(f"LOCK TABLE {table} IN {mode} MODE")
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(review.Approve, approve(operation_id), timeout=15)
            _terminate_backend(url, _waiting_backend(url, time.monotonic() + 10))
            with pytest.raises(grpc.RpcError) as refused:
                waiting.result()
        blocker.rollback()
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value.details()
    assert count(url, "SELECT count(*) FROM decisions") == 0
    assert review.Approve(approve(operation_id), timeout=15).outcome == common_pb2.OUTCOME_COMMITTED


def _terminate_backend(url: str, pid: int) -> None:
    with _admin(url) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _replace_with_directory(database: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    database.mkdir()


def _move_directory_away(database: Path) -> None:
    database.parent.rename(database.parent.with_name(database.parent.name + "-gone"))


def _lock_directory(database: Path) -> None:
    database.parent.chmod(0)


SQLITE_LOSSES: dict[str, Callable[[Path], None]] = {
    "file replaced by a directory": _replace_with_directory,
    "directory moved away": _move_directory_away,
    "directory chmod 000": _lock_directory,
}


@pytest.mark.parametrize("loss", sorted(SQLITE_LOSSES))
def test_sqlite_file_unreachable_answers_unavailable(tmp_path: Path, loss: str) -> None:
    if loss == "directory chmod 000" and os.geteuid() == 0:
        pytest.skip("permissions do not bind root")
    state = tmp_path / "state"
    state.mkdir()
    database = state / "orchestrator.db"
    stack = _stack(f"sqlite:///{database}", tmp_path)
    try:
        operation_id = _begin(stack)
        SQLITE_LOSSES[loss](database)
        assert _codes(stack, operation_id) == dict.fromkeys(CALLS, grpc.StatusCode.UNAVAILABLE)
        assert stack.effects() == 0
    finally:
        stack.close()
        state.chmod(0o755) if state.exists() else None
        shutil.rmtree(tmp_path / "state-gone", ignore_errors=True)
