"""decisionflow-relay as a real process between a real orchestrator (with authentication: the relay
presents an auditor's token) and a real nats-server with JetStream: every event reaches the stream once,
on its subject, with its Nats-Msg-Id and CloudEvents document; a relay started again from its cursor
file sends nothing new and skips nothing."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
import pytest

from decisionflow.v1 import common_pb2, review_pb2_grpc
from decisionflow_relay.domain import DEFAULT_ORIGIN
from decisionflow_server.foundation.processes import free_port, launch
from decisionflow_server.runtime.server_security import ServerSecurity
from tests.support.nats import Delivery, NatsCluster, consume_all, start_nats
from tests.support.relay import RELAY_MODULE, Leaf, read_cursor, spawn_relay, wait_for_cursor
from tests.support.secure import SecureStack, start_secure_stack
from tests.support.stack import approve, decline, start_request

# Real services and processes: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

STREAM = "DECISIONFLOW_EVENTS"
SUBJECTS = "decisionflow.>"
ORIGIN_TOKEN = "decisionflow_local/audit"  # DEFAULT_ORIGIN with its '.' made a token


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsCluster]:
    cluster = start_nats(tmp_path / "nats")
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[SecureStack]:
    stack = start_secure_stack(tmp_path)
    try:
        yield stack
    finally:
        stack.close()


def token_file(secure: SecureStack, directory: Path, principal: str) -> Path:
    path = directory / f"{principal}.token"
    path.write_text(secure.tokens[principal] + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def review(secure: SecureStack, cases: range, *, declined: frozenset[int] = frozenset()) -> None:
    """Start a review of each case as the author and decide it as the reviewer (declined: these decline)."""
    stub = review_pb2_grpc.ReviewServiceStub(secure.channel(receiver=False))
    for number in cases:
        started = stub.StartReview(start_request(case_id=f"R-{number}"), metadata=secure.as_("arthur"), timeout=30)
        decide = decline if number in declined else approve
        answer = stub.Approve(decide(started.proposal.operation_id), metadata=secure.as_("rita"), timeout=30)
        assert answer.outcome in (common_pb2.OUTCOME_COMMITTED, common_pb2.OUTCOME_DECLINED)


def check_once_in_case_order(leaves: list[Leaf], deliveries: list[Delivery]) -> None:
    """Each leaf's message is in the stream once, and each case's messages are in log order (across cases
    publishes overlap, so the stream interleaves cases in any order)."""
    ids = [delivery.message_id for delivery in deliveries]
    assert sorted(ids) == sorted(f"{DEFAULT_ORIGIN}/{leaf.index}" for leaf in leaves)
    indices_by_case: dict[str, list[int]] = {}
    for delivery in deliveries:
        data = delivery.document()["data"]
        assert isinstance(data, dict)
        indices_by_case.setdefault(str(data["case_id"]), []).append(int(data["index"]))
    assert all(indices == sorted(indices) for indices in indices_by_case.values()), indices_by_case


def test_every_event_once_with_its_subject_header_and_cloudevent_then_a_restart_resends_nothing(
    tmp_path: Path, secure: SecureStack, nats_server: NatsCluster
) -> None:
    review(secure, range(4), declined=frozenset({3}))
    cursor_file = tmp_path / "relay.cursor"
    target = f"127.0.0.1:{secure.stack.orchestrator_port}"
    auditor = token_file(secure, tmp_path, "audrey")
    relay = spawn_relay(tmp_path, target, nats_server.servers, cursor_file, token_file=auditor)
    try:
        leaves = wait_for_cursor(cursor_file, secure.stack.orchestrator_url, relay)
        review(secure, range(4, 6))
        leaves = wait_for_cursor(cursor_file, secure.stack.orchestrator_url, relay)
        samples = relay.metrics()
    finally:
        assert relay.service.stop() == 0, relay.service.log()
    # Four cases decided and committed or declined, two more while the relay ran: proposal, decision, effect
    # (none after a decline).
    assert Counter(leaf.kind for leaf in leaves) == {"proposal": 6, "decision": 6, "effect": 5}
    assert samples["decisionflow_relay_published_total"] == len(leaves)
    assert samples["decisionflow_relay_duplicates_total"] == 0
    assert samples["decisionflow_relay_cursor_index"] == len(leaves)
    assert samples["decisionflow_relay_lag_events"] == 0
    assert samples["decisionflow_relay_lag_seconds"] == 0

    deliveries = consume_all(nats_server.servers, STREAM, SUBJECTS)
    check_once_in_case_order(leaves, deliveries)
    by_id = {delivery.message_id: delivery for delivery in deliveries}
    for leaf in leaves:
        delivery = by_id[f"{DEFAULT_ORIGIN}/{leaf.index}"]
        document = delivery.document()
        data = document["data"]
        assert isinstance(data, dict)
        assert delivery.subject == f"decisionflow.{ORIGIN_TOKEN}.{leaf.kind}.record_support_review"
        assert delivery.headers["Nats-Msg-Id"] == f"{DEFAULT_ORIGIN}/{leaf.index}"
        attributes = ("specversion", "id", "source", "type", "subject", "datacontenttype")
        assert {key: document[key] for key in attributes} == {
            "specversion": "1.0",
            "id": f"{DEFAULT_ORIGIN}/{leaf.index}",
            "source": DEFAULT_ORIGIN,
            "type": f"dev.decisionflow.{leaf.kind}",
            "subject": leaf.operation_id,
            "datacontenttype": "application/json",
        }
        assert isinstance(document["time"], str)
        assert datetime.fromisoformat(document["time"]) == datetime.fromisoformat(str(data["occurred_at"]))
        assert base64.b64decode(str(data["leaf"])) == leaf.leaf
        assert (data["index"], data["kind"], data["case_id"], data["operation_id"]) == (
            leaf.index,
            leaf.kind,
            leaf.case_id,
            leaf.operation_id,
        )
        assert data["action"] == "record_support_review"
        if leaf.kind == "decision":
            assert data["principal"] == "rita"
            assert data["decision"] == ("DECLINE" if leaf.case_id == "R-3" else "APPROVE")
        if leaf.kind == "proposal":
            assert (data["principal"], data["state"], data["decision"]) == ("arthur", "PENDING_REVIEW", None)

    # Started again from the cursor: nothing to send until something new happens, then only that.
    stored = read_cursor(cursor_file)
    again = spawn_relay(tmp_path, target, nats_server.servers, cursor_file, name="relay-again", token_file=auditor)
    try:
        time.sleep(1.0)  # time for a relay that would re-send to do so; the assertion below is on what it sent
        assert again.metrics()["decisionflow_relay_published_total"] == 0
        review(secure, range(6, 7))
        leaves = wait_for_cursor(cursor_file, secure.stack.orchestrator_url, again)
        samples = again.metrics()
    finally:
        assert again.service.stop() == 0, again.service.log()
    assert len(leaves) == stored + 3
    assert samples["decisionflow_relay_published_total"] == 3
    assert samples["decisionflow_relay_duplicates_total"] == 0
    check_once_in_case_order(leaves, consume_all(nats_server.servers, STREAM, SUBJECTS, durable="after-restart"))


def test_a_cursor_behind_the_stream_resends_and_jetstream_drops_every_resend(
    tmp_path: Path, secure: SecureStack, nats_server: NatsCluster
) -> None:
    review(secure, range(3))
    cursor_file = tmp_path / "relay.cursor"
    target = f"127.0.0.1:{secure.stack.orchestrator_port}"
    auditor = token_file(secure, tmp_path, "audrey")
    relay = spawn_relay(tmp_path, target, nats_server.servers, cursor_file, token_file=auditor)
    try:
        leaves = wait_for_cursor(cursor_file, secure.stack.orchestrator_url, relay)
    finally:
        relay.service.kill()
    # As after a crash before the cursor was written: the file is behind what JetStream holds.
    cursor_file.write_text("2\n", encoding="ascii")
    again = spawn_relay(tmp_path, target, nats_server.servers, cursor_file, name="relay-again", token_file=auditor)
    try:
        wait_for_cursor(cursor_file, secure.stack.orchestrator_url, again)
        samples = again.metrics()
    finally:
        assert again.service.stop() == 0, again.service.log()
    assert samples["decisionflow_relay_published_total"] == len(leaves) - 2
    assert samples["decisionflow_relay_duplicates_total"] == len(leaves) - 2
    check_once_in_case_order(leaves, consume_all(nats_server.servers, STREAM, SUBJECTS))


def test_a_reviewer_token_is_refused_and_the_relay_exits_2_naming_the_refusal(
    tmp_path: Path, secure: SecureStack, nats_server: NatsCluster
) -> None:
    cursor_file = tmp_path / "relay.cursor"
    target = f"127.0.0.1:{secure.stack.orchestrator_port}"
    args = ["--orchestrator-target", target, "--nats-url", nats_server.servers, "--cursor-file", str(cursor_file)]
    args += ["--token-file", str(token_file(secure, tmp_path, "rita"))]
    relay = launch(RELAY_MODULE, args, tmp_path, "relay", announces_port=False)
    assert relay.process.wait(60) == 2
    last = json.loads(relay.log().strip().splitlines()[-1])
    assert last["level"] == "error"
    assert last["code"] == "PERMISSION_DENIED"
    assert last["message"].startswith("the orchestrator refused WatchEvents (PERMISSION_DENIED): 'rita' may not call")
    assert read_cursor(cursor_file) == 0


def test_a_broker_outage_is_logged_once_retried_until_it_ends_and_holds_the_cursor(
    tmp_path: Path, secure: SecureStack, nats_server: NatsCluster
) -> None:
    review(secure, range(2))
    cursor_file = tmp_path / "relay.cursor"
    target = f"127.0.0.1:{secure.stack.orchestrator_port}"
    auditor = token_file(secure, tmp_path, "audrey")
    relay = spawn_relay(
        tmp_path, target, nats_server.servers, cursor_file, token_file=auditor, extra=["--publish-timeout-seconds", "1"]
    )
    node = nats_server.nodes[0]
    try:
        before = len(wait_for_cursor(cursor_file, secure.stack.orchestrator_url, relay))
        node.kill()
        # The orchestrator does not wait for the relay: these reviews commit while nothing can be published.
        review(secure, range(2, 4))
        deadline = time.monotonic() + 60
        while (samples := relay.metrics())["decisionflow_relay_publish_errors_total"] < 3:
            assert time.monotonic() < deadline, relay.service.log()
            time.sleep(0.2)
        assert samples["decisionflow_relay_broker_up"] == 0
        assert samples["decisionflow_relay_lag_events"] == 6
        assert samples["decisionflow_relay_lag_seconds"] > 0
        assert read_cursor(cursor_file) == before
        node.start()
        node.wait_healthy()
        leaves = wait_for_cursor(cursor_file, secure.stack.orchestrator_url, relay)
        samples = relay.metrics()
    finally:
        assert relay.service.stop() == 0, relay.service.log()
    assert len(leaves) == before + 6
    assert samples["decisionflow_relay_broker_up"] == 1
    messages = [json.loads(line)["message"] for line in relay.service.log().splitlines()]
    assert sum(m.startswith("JetStream is not acknowledging publishes") for m in messages) == 1
    assert sum(m.startswith("JetStream acknowledges publishes again") for m in messages) == 1
    check_once_in_case_order(leaves, consume_all(nats_server.servers, STREAM, SUBJECTS))


def test_an_orchestrator_restart_is_logged_once_and_the_relay_resumes_from_its_position(
    tmp_path: Path, secure: SecureStack, nats_server: NatsCluster
) -> None:
    review(secure, range(2))
    cursor_file = tmp_path / "relay.cursor"
    port = secure.stack.orchestrator_port
    auditor = token_file(secure, tmp_path, "audrey")
    relay = spawn_relay(tmp_path, f"127.0.0.1:{port}", nats_server.servers, cursor_file, token_file=auditor)
    try:
        before = len(wait_for_cursor(cursor_file, secure.stack.orchestrator_url, relay))
        security = ServerSecurity(credentials_file=secure.credentials_file)
        secure.stack.stop_orchestrator()
        time.sleep(1.0)  # the relay's watch fails and is retried while nothing listens
        secure.stack.start_orchestrator(
            address=f"127.0.0.1:{port}", security=security, receiver_token=secure.tokens["walter"]
        )
        review(secure, range(2, 4))
        leaves = wait_for_cursor(cursor_file, secure.stack.orchestrator_url, relay)
    finally:
        assert relay.service.stop() == 0, relay.service.log()
    assert len(leaves) == before + 6
    messages = [json.loads(line)["message"] for line in relay.service.log().splitlines()]
    assert sum(m.startswith("the event feed failed (UNAVAILABLE") for m in messages) == 1, messages
    assert sum(m.startswith("the event feed answers again") for m in messages) == 1, messages
    check_once_in_case_order(leaves, consume_all(nats_server.servers, STREAM, SUBJECTS))


def documented_consumer() -> str:
    """The Python block of docs/events.md's relay section: the worked consumer."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "events.md").read_text(encoding="utf-8")
    relay_section = page[page.index("## The relay into NATS JetStream") :]
    [block] = re.findall(r"```python\n(.*?)```", relay_section, re.DOTALL)
    return str(block)


def test_the_documented_consumer_records_each_effect_once_and_a_second_run_adds_nothing(
    tmp_path: Path, secure: SecureStack, nats_server: NatsCluster
) -> None:
    review(secure, range(3), declined=frozenset({1}))
    cursor_file = tmp_path / "relay.cursor"
    target = f"127.0.0.1:{secure.stack.orchestrator_port}"
    relay = spawn_relay(
        tmp_path, target, nats_server.servers, cursor_file, token_file=token_file(secure, tmp_path, "audrey")
    )
    try:
        leaves = wait_for_cursor(cursor_file, secure.stack.orchestrator_url, relay)
    finally:
        assert relay.service.stop() == 0, relay.service.log()
    effects = {f"{DEFAULT_ORIGIN}/{leaf.index}": leaf.case_id for leaf in leaves if leaf.kind == "effect"}
    assert sorted(effects.values()) == ["R-0", "R-2"]

    namespace: dict[str, Any] = {"__name__": "documented_consumer"}
    exec(compile(documented_consumer(), "docs/events.md", "exec"), namespace)
    db = sqlite3.connect(tmp_path / "effects.db")

    def seen() -> dict[str, str]:
        return dict(db.execute("SELECT id, case_id FROM seen").fetchall())

    async def run_until_nothing_is_pending() -> None:
        consumer = asyncio.create_task(namespace["consume"](db, nats_server.servers))
        try:
            deadline = time.monotonic() + 60
            while not await consumer_drained(nats_server.servers):
                assert not consumer.done(), consumer
                assert time.monotonic() < deadline, "the documented consumer did not drain its subjects"
                await asyncio.sleep(0.1)
        finally:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer

    asyncio.run(run_until_nothing_is_pending())
    assert seen() == effects
    # Run again on the same durable: nothing is pending, nothing is recorded twice.
    asyncio.run(run_until_nothing_is_pending())
    assert seen() == effects
    assert db.execute("SELECT count(*) FROM seen").fetchone() == (2,)


async def consumer_drained(servers: str) -> bool:
    """Whether the documented consumer's durable exists and has nothing pending or awaiting its ack."""
    nc = await nats.connect(servers=servers.split(","))
    try:
        info = await nc.jetstream().consumer_info(STREAM, "effects-ledger")
    except nats.js.errors.NotFoundError:
        return False
    finally:
        await nc.close()
    return bool(info.num_pending == 0 and info.num_ack_pending == 0 and (info.delivered.stream_seq or 0) > 0)


def test_a_relay_started_while_nats_is_down_says_so_reports_the_broker_down_and_stops_at_once(
    tmp_path: Path, secure: SecureStack
) -> None:
    cursor_file = tmp_path / "relay.cursor"
    cursor_file.write_text("7\n")
    nowhere = f"nats://127.0.0.1:{free_port()}"
    relay = spawn_relay(
        tmp_path,
        f"127.0.0.1:{secure.stack.orchestrator_port}",
        nowhere,
        cursor_file,
        token_file=token_file(secure, tmp_path, "audrey"),
    )
    deadline = time.monotonic() + 60
    while not any("cannot be used yet" in line for line in relay.service.log().splitlines()):
        assert relay.alive() and time.monotonic() < deadline, relay.service.log()
        time.sleep(0.2)
    samples = relay.metrics()
    # Waiting for the broker does not look healthy: the alert on the broker fires, and the cursor is the stored one.
    assert samples["decisionflow_relay_broker_up"] == 0
    assert samples["decisionflow_relay_cursor_index"] == 7
    assert relay.service.stop(timeout=15) == 0, relay.service.log()
    assert read_cursor(cursor_file) == 7
