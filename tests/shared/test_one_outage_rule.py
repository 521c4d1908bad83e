"""The same database outage, driven through both services, reads the same on both: UNAVAILABLE with
reason UNAVAILABLE, words saying the database cannot answer (unreachable, busy or failing over) and
that the call may be retried with the same key, and a RetryInfo with the delay (as a budget refusal carries), for a
read and a write, with no path, host, user or SQL of the database in what the caller sees."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import psycopg
import pytest
from psycopg import sql

from decisionflow import reasons
from decisionflow.status_details import error_info, retry_delay
from decisionflow.v1 import effect_receiver_pb2, review_pb2
from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.payloads import apply_request
from tests.support.stack import Stack, start_request

OPERATION = "op-v1-" + "0" * 64


Refusal = tuple[grpc.StatusCode, str | None, str, float | None]
WORDS = (
    " database unavailable: the database cannot answer: it is unreachable, busy or failing over (OperationalError); "
    "the call may be retried with the same key after 1.000s"
)


def _refusal(call: Callable[[], object]) -> Refusal:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    refusal = refused.value
    return refusal.code(), error_info(refusal)[0], refusal.details() or "", retry_delay(refusal)


def _answers(stack: Stack) -> dict[str, dict[str, Refusal]]:
    """A read and a write on each service, as their callers see them."""
    review, receiver = stack.review(), stack.receiver()
    return {
        "orchestrator": {
            "read": _refusal(
                lambda: review.GetOperation(review_pb2.GetOperationRequest(operation_id=OPERATION), timeout=10)
            ),
            "write": _refusal(lambda: review.StartReview(start_request(case_id="T-3001"), timeout=10)),
        },
        "receiver": {
            "read": _refusal(
                lambda: receiver.Lookup(effect_receiver_pb2.LookupRequest(operation_id=OPERATION), timeout=10)
            ),
            "write": _refusal(lambda: receiver.Apply(apply_request(OPERATION), timeout=10)),
        },
    }


def _assert_one_rule(answers: dict[str, dict[str, Refusal]], *hidden: str) -> None:
    for service, calls in answers.items():
        for kind, (code, reason, message, delay) in calls.items():
            assert code == grpc.StatusCode.UNAVAILABLE, (service, kind, message)
            assert reason == reasons.UNAVAILABLE, (service, kind, reason)
            assert message == service + WORDS, (service, kind, message)
            assert delay == 1.0, (service, kind, delay)
            for secret in (*hidden, "SELECT", "INSERT"):
                assert secret not in message, (service, kind, message)
    # One rule: strip the service's name and both services said the same thing for the same outage.
    said = {
        service: {
            kind: (code, reason, message.removeprefix(service), delay)
            for kind, (code, reason, message, delay) in calls.items()
        }
        for service, calls in answers.items()
    }
    assert said["orchestrator"] == said["receiver"], answers


def test_sqlite_directories_moved_away_read_the_same_on_both_services(
    make_stack: Callable[..., Stack], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directories = {name: tmp_path / f"{name}-state" for name in ("orchestrator", "receiver")}
    for directory in directories.values():
        directory.mkdir()
    stack = make_stack(
        f"sqlite:///{directories['orchestrator'] / 'orchestrator.db'}",
        receiver_url=f"sqlite:///{directories['receiver'] / 'receiver.db'}",
    )
    try:
        for directory in directories.values():
            directory.rename(directory.with_name(directory.name + "-gone"))
        with caplog.at_level(logging.WARNING, logger="decisionflow_server.storage.transactions"):
            _assert_one_rule(_answers(stack), str(tmp_path), "orchestrator.db", "receiver.db")
        # The driver's own text, kept from the callers, is in the server's log for the operator.
        logged = [
            record.getMessage()
            for record in caplog.records
            if record.name == "decisionflow_server.storage.transactions"
        ]
        assert len(logged) == 4 and all("unable to open database file" in line for line in logged), logged
    finally:
        for directory in directories.values():
            shutil.rmtree(directory.with_name(directory.name + "-gone"), ignore_errors=True)


@pytest.fixture
def two_postgres_databases() -> Iterator[tuple[str, str]]:
    urls = (create_postgres_database(), create_postgres_database())
    try:
        yield urls
    finally:
        for url in urls:
            drop_postgres_database(url)


def _refuse_connections(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))


@pytest.mark.postgres
def test_postgres_refusing_connections_reads_the_same_on_both_services(
    make_stack: Callable[..., Stack], two_postgres_databases: tuple[str, str]
) -> None:
    orchestrator_url, receiver_url = two_postgres_databases
    stack = make_stack(orchestrator_url, receiver_url=receiver_url)
    for url in two_postgres_databases:
        _refuse_connections(url)
    names = [url.rsplit("/", 1)[1] for url in two_postgres_databases]
    _assert_one_rule(_answers(stack), *names, "127.0.0.1", "postgres@")
