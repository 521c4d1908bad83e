"""Database URLs naming several PostgreSQL hosts, as libpq writes them (``postgresql://u@h1:p1,h2:p2/db``):
the services take them, and libpq picks the host by ``target_session_attrs``: the writable one for
the primary URL, a standby for the receiver's replica URL with ``prefer-standby``.

Checked with a real receiver process against a primary and its streaming standby, the standby named
first in both URLs: Apply commits on the primary, and Lookup is answered from the standby."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from decisionflow.client import Consistency, LookupStatus, ReceiverClient
from decisionflow_demo.launch import RECEIVER_MODULE, receiver_args
from decisionflow_server.foundation.processes import spawn
from decisionflow_server.storage import db
from tests.campaigns.pgcluster import StreamingPair, streaming_pair
from tests.support.payloads import effect_request, new_operation_id


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            "postgresql://u@127.0.0.1:5441,127.0.0.1:5442/db?target_session_attrs=read-write",
            "postgresql+psycopg://u@/db?target_session_attrs=read-write&host=127.0.0.1:5441&host=127.0.0.1:5442",
        ),
        ("postgresql://u:p%40ss@a:1,b:2/db", "postgresql+psycopg://u:p%40ss@/db?host=a:1&host=b:2"),
        ("postgres://a,b/db", "postgresql+psycopg:///db?host=a&host=b"),
        ("postgresql://a:1,b:2?sslmode=require", "postgresql+psycopg:///?sslmode=require&host=a:1&host=b:2"),
        # One host is left as it is.
        ("postgresql://u@h:5/db?x=1", "postgresql+psycopg://u@h:5/db?x=1"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
    ],
)
def test_several_hosts_become_host_parameters(given: str, expected: str) -> None:
    assert db.normalise_url(given) == expected


@pytest.fixture
def pair() -> Iterator[StreamingPair]:
    with streaming_pair() as made:
        yield made


def _hosts(pair: StreamingPair) -> str:
    return f"127.0.0.1:{pair.replica.port},127.0.0.1:{pair.primary.port}"


@pytest.mark.postgres
@pytest.mark.slow  # two PostgreSQL servers of the test's own and a receiver process
def test_a_receiver_writes_to_the_writable_host_and_reads_a_standby(pair: StreamingPair, tmp_path: Path) -> None:
    pair.create_database("receiver")
    primary_url = f"postgresql://postgres@{_hosts(pair)}/receiver?target_session_attrs=read-write&connect_timeout=2"
    replica_url = f"postgresql://postgres@{_hosts(pair)}/receiver?target_session_attrs=prefer-standby"
    process = spawn(
        RECEIVER_MODULE, receiver_args(primary_url, extra=["--replica-database-url", replica_url]), tmp_path, "receiver"
    )
    process.wait_serving()
    first, second = new_operation_id(), new_operation_id()
    try:
        with grpc.insecure_channel(process.target) as channel:
            client = ReceiverClient(channel, timeout=10)
            client.apply(effect_request(first))
            pair.wait_caught_up()
            replayed = client.lookup(first)
            # With the standby's replay paused, an effect committed on the primary is not found by
            # Lookup: the answer comes from the standby, though it is named first in both URLs.
            pair.pause_replay()
            try:
                client.apply(effect_request(second))
                on_primary = pair.primary.query(
                    "SELECT count(*) FROM effects WHERE operation_id = %s", (second,), "receiver"
                )
                not_replayed = client.lookup(second)
            finally:
                pair.resume_replay()
    finally:
        assert process.stop() == 0
    assert (replayed.status, replayed.consistency) == (LookupStatus.APPLIED, Consistency.EVENTUAL)
    assert on_primary == [(1,)]
    assert (not_replayed.status, not_replayed.consistency) == (LookupStatus.NOT_FOUND, Consistency.EVENTUAL)
