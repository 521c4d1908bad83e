"""The event feed over real gRPC (EventService.WatchEvents, docs/events.md): every sequenced leaf once, in
index order, from any cursor; filters; heartbeats that move a filtered stream's cursor; who may watch
what; the per-principal stream budget; a caller that stops reading is closed with the index to resume
from; a stopping server ends its streams at once; and ``wait_for_outcome`` across a restart of the
orchestrator process it waits on, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from decisionflow import reasons
from decisionflow.client import EventsClient, EventView, Heartbeat, ReviewClient, WaitTimedOut
from decisionflow.client.errors import InvalidRequest, NotFound, TooManyStreams
from decisionflow.status_details import error_info
from decisionflow.transparency import decode_leaf
from decisionflow.v1 import common_pb2, events_pb2, events_pb2_grpc, review_pb2_grpc
from decisionflow.vocabulary import Decision, OperationState
from decisionflow_server.foundation.processes import free_port
from orchestrator.audit_log.feed import DEFAULT_FEED, FeedSettings
from tests.support.secure import SecureStack, start_secure_stack
from tests.support.stack import Stack, approve, decline, spawn_orchestrator, spawn_receiver, start_request

pytest_plugins = ["tests.support.databases"]
# Real servers, and a stream that stalls on purpose: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def _events(stub: events_pb2_grpc.EventServiceStub, count: int, **request: object) -> list[events_pb2.Event]:
    """The first count events of a stream opened with request (its heartbeats skipped), then cancel it."""
    stream: Any = stub.WatchEvents(events_pb2.WatchEventsRequest(**request), timeout=30)  # type: ignore[arg-type]
    got: list[events_pb2.Event] = []
    try:
        for message in stream:
            if message.HasField("event"):
                got.append(message.event)
                if len(got) == count:
                    return got
    finally:
        stream.cancel()
    return got


def _approved_case(stack: Stack, case_id: str, body: str = "Known issue; update to 4.2.1.") -> str:
    review = stack.review()
    operation_id = review.StartReview(start_request(case_id, body), timeout=15).proposal.operation_id
    review.Approve(approve(operation_id), timeout=15)
    return operation_id


@pytest.fixture
def stack(make_stack: Callable[..., Stack], database_url: str) -> Stack:
    """A stack on SQLite and on PostgreSQL, heartbeats every 0.2 s."""
    return make_stack(orchestrator_url=database_url, events=_feed(heartbeat_seconds=0.2))


def _feed(**changes: Any) -> FeedSettings:
    return replace(DEFAULT_FEED, **changes)


def test_a_stream_sends_every_event_once_in_index_order_and_resumes_without_gap_or_repeat(stack: Stack) -> None:
    first = _approved_case(stack, "T-1")
    declined = stack.review().StartReview(start_request("T-2", "Please send the export."), timeout=15)
    stack.review().Approve(decline(declined.proposal.operation_id), timeout=15)
    stub = events_pb2_grpc.EventServiceStub(stack._channel(stack.orchestrator_port))

    whole = _events(stub, 5)
    assert [e.index for e in whole] == [0, 1, 2, 3, 4]
    assert [events_pb2.EventKind.Name(e.kind) for e in whole] == [
        "EVENT_KIND_PROPOSAL",
        "EVENT_KIND_DECISION",
        "EVENT_KIND_EFFECT",
        "EVENT_KIND_PROPOSAL",
        "EVENT_KIND_DECISION",
    ]
    # The decoded form says what the leaf says; the leaf is the audit log's, byte for byte.
    assert [e.operation_id for e in whole[:3]] == [first] * 3
    assert whole[2].state == common_pb2.OPERATION_STATE_COMMITTED
    assert whole[4].state == common_pb2.OPERATION_STATE_DECLINED and whole[4].decision == common_pb2.DECISION_DECLINE
    assert {e.action for e in whole} == {"record_support_review"}
    for event in whole:
        assert decode_leaf(event.leaf).operation_id == event.operation_id

    # A reconnection from the last index seen plus one continues exactly there.
    resumed = _events(stub, 2, start_index=whole[2].index + 1)
    assert [e.index for e in resumed] == [3, 4]
    assert [e.leaf for e in resumed] == [e.leaf for e in whole[3:]]


def test_filters_narrow_the_stream_and_heartbeats_move_its_cursor(stack: Stack) -> None:
    first = _approved_case(stack, "T-1")
    _approved_case(stack, "T-2", "Please send the diagnostic export.")
    client = EventsClient(stack._channel(stack.orchestrator_port))

    def take(count: int, **filters: object) -> list[EventView | Heartbeat]:
        got: list[EventView | Heartbeat] = []
        stream = client.watch(heartbeats=True, **filters)  # type: ignore[arg-type]
        for item in stream:
            got.append(item)
            if len(got) == count:
                break
        stream.close()
        return got

    by_case = [i for i in take(6, case_id="T-2") if isinstance(i, EventView)]
    assert {e.case_id for e in by_case} == {"T-2"} and [e.index for e in by_case] == [3, 4, 5]
    by_operation = [i for i in take(5, operation_id=first) if isinstance(i, EventView)]
    assert [e.index for e in by_operation] == [0, 1, 2]
    decisions = [i for i in take(4, kinds=["decision"]) if isinstance(i, EventView)]
    assert [(e.index, e.kind, e.decision) for e in decisions] == [
        (1, "decision", Decision.APPROVE),
        (4, "decision", Decision.APPROVE),
    ]
    # Nothing matches, so only heartbeats come: the first at the start index, the next at the log's end.
    quiet = take(2, action="no_such_action")
    assert all(isinstance(i, Heartbeat) for i in quiet)
    assert [i.next_index for i in quiet if isinstance(i, Heartbeat)] == [0, 6]


def test_from_now_sends_only_what_is_sequenced_after_the_call(stack: Stack) -> None:
    _approved_case(stack, "T-1")
    client = EventsClient(stack._channel(stack.orchestrator_port))
    stream = client.watch(from_now=True, heartbeats=True)
    opened = next(stream)
    assert isinstance(opened, Heartbeat) and opened.next_index == 3
    later = _approved_case(stack, "T-2", "Please send the diagnostic export.")
    seen = []
    for item in stream:
        if isinstance(item, EventView):
            seen.append(item)
            if len(seen) == 3:
                break
    stream.close()
    assert [(e.index, e.operation_id) for e in seen] == [(3, later), (4, later), (5, later)]
    assert seen[-1].state is OperationState.COMMITTED


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"kinds": [0]}, "kinds[0]"),
        ({"case_id": "no spaces allowed"}, "case_id"),
        ({"operation_id": "op-v1-short"}, "operation_id"),
        ({"action": "x" * 65}, "action"),
    ],
)
def test_a_bad_filter_is_refused_naming_its_field(
    make_stack: Callable[..., Stack], request_fields: dict[str, object], field: str
) -> None:
    stack = make_stack()
    stub = events_pb2_grpc.EventServiceStub(stack._channel(stack.orchestrator_port))
    with pytest.raises(grpc.RpcError) as refused:
        _events(stub, 1, **request_fields)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert field in (refused.value.details() or "")


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[SecureStack]:
    """Authentication on; two streams per principal."""
    stack = start_secure_stack(tmp_path, events=_feed(streams_per_principal=2, heartbeat_seconds=0.2))
    try:
        yield stack
    finally:
        stack.close()


def test_an_author_watches_only_the_cases_they_proposed_in(secure: SecureStack) -> None:
    review = secure.stack.review()
    mine = review.StartReview(start_request("T-1"), metadata=secure.as_("arthur"), timeout=15).proposal.operation_id
    theirs = review.StartReview(
        start_request("T-2", "Please send the export."), metadata=secure.as_("sam"), timeout=15
    ).proposal.operation_id
    channel = secure.channel(receiver=False)

    def first_event(principal: str, **filters: object) -> EventView:
        client = EventsClient(channel, metadata=secure.as_(principal))
        stream = client.watch(**filters)  # type: ignore[arg-type]
        try:
            return next(i for i in stream if isinstance(i, EventView))
        finally:
            stream.close()

    assert first_event("arthur", case_id="T-1").operation_id == mine
    assert first_event("arthur", operation_id=mine).case_id == "T-1"
    # The auditor and the operator see every case, with no filter.
    assert first_event("audrey", start_index=1).operation_id == theirs
    assert first_event("olga").operation_id == mine
    with pytest.raises(NotFound) as other:
        first_event("arthur", case_id="T-2")
    assert other.value.metadata[reasons.CASE_ID] == "T-2"
    with pytest.raises(NotFound):
        first_event("arthur", operation_id=theirs)
    with pytest.raises(InvalidRequest) as unnamed:
        first_event("arthur")
    assert "case_id" in str(unnamed.value)


def test_a_principal_holds_at_most_its_streams_and_gets_a_slot_back_when_one_ends(secure: SecureStack) -> None:
    channel = secure.channel(receiver=False)
    stub = events_pb2_grpc.EventServiceStub(channel)
    held: list[Any] = [
        stub.WatchEvents(events_pb2.WatchEventsRequest(), metadata=secure.as_("audrey")) for _ in range(2)
    ]
    try:
        for stream in held:
            assert next(stream).HasField("heartbeat")
        client = EventsClient(channel, metadata=secure.as_("audrey"))
        with pytest.raises(TooManyStreams) as refused:
            next(client.watch(heartbeats=True))
        assert refused.value.stream_limit == 2 and refused.value.principal == "audrey"
        assert refused.value.reason == reasons.TOO_MANY_STREAMS
        # Another principal's budget is its own.
        olga = EventsClient(channel, metadata=secure.as_("olga")).watch(heartbeats=True)
        assert isinstance(next(olga), Heartbeat)
        olga.close()
        held.pop().cancel()
        deadline = time.monotonic() + 10
        while True:
            try:
                again = client.watch(heartbeats=True)
                assert isinstance(next(again), Heartbeat)
                again.close()
                break
            except TooManyStreams:
                assert time.monotonic() < deadline, "the cancelled stream's slot never came back"
                time.sleep(0.05)
    finally:
        for stream in held:
            stream.cancel()


def test_a_caller_that_stops_reading_is_closed_with_the_index_to_resume_from(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(events=_feed(stall_seconds=1.0))
    review = stack.review()
    # Proposals of about 60 KB each: a few megabytes of leaves fill any transport window.
    for case in range(40):
        review.StartReview(start_request(f"T-{case}", f"{case} " + "x" * 60_000), timeout=15)
    channel = grpc.insecure_channel(
        f"127.0.0.1:{stack.orchestrator_port}", options=[("grpc.http2.bdp_probe", 0), ("grpc.enable_retries", 0)]
    )
    try:
        stream: Any = events_pb2_grpc.EventServiceStub(channel).WatchEvents(events_pb2.WatchEventsRequest(), timeout=60)
        assert next(stream).HasField("heartbeat")
        time.sleep(4)  # reads nothing: the server's writes stall, and it gives up after a second
        received = []
        with pytest.raises(grpc.RpcError) as closed:
            for message in stream:
                received.append(message.event.index)
        assert closed.value.code() is grpc.StatusCode.UNAVAILABLE
        reason, metadata, _ = error_info(closed.value)
        assert reason == reasons.WATCH_FELL_BEHIND
        resume = int(metadata[reasons.NEXT_INDEX])
        # Everything below next_index came; resuming there continues the log with nothing lost.
        assert received == list(range(len(received))) and resume >= len(received) - 1 and resume < 40
    finally:
        channel.close()
    client = EventsClient(stack._channel(stack.orchestrator_port))
    rest = client.watch(start_index=resume)
    assert next(rest).index == resume  # type: ignore[union-attr]
    rest.close()


def test_wait_for_outcome_answers_as_get_operation_and_times_out_with_the_last_answer(stack: Stack) -> None:
    review = stack.review()
    operation_id = review.StartReview(start_request("T-1"), timeout=15).proposal.operation_id
    client = ReviewClient(stack._channel(stack.orchestrator_port))
    with pytest.raises(WaitTimedOut) as waited:
        client.wait_for_outcome(operation_id, timeout=0.5)
    assert waited.value.operation.state is OperationState.PENDING_REVIEW
    answers: list[object] = []
    waiter = threading.Thread(target=lambda: answers.append(client.wait_for_outcome(operation_id, timeout=30)))
    waiter.start()
    time.sleep(0.3)
    review.Approve(approve(operation_id), timeout=15)
    waiter.join(40)
    [answer] = answers
    assert answer == client.get_operation(operation_id)
    assert answer.state is OperationState.COMMITTED
    # Settled already: answered at once, from GetOperation.
    assert client.wait_for_outcome(operation_id, timeout=5) == answer


def test_wait_for_outcome_misses_nothing_decided_while_its_orchestrator_was_down(tmp_path: Path) -> None:
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    orchestrator_url = f"sqlite:///{tmp_path / 'orchestrator.db'}"
    receiver = spawn_receiver(tmp_path, receiver_url)
    address = f"127.0.0.1:{free_port()}"
    a = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "orchestrator-a", extra=["--address", address])
    b = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "orchestrator-b")
    processes = [receiver, a, b]
    try:
        waiting = grpc.insecure_channel(address)
        deciding = grpc.insecure_channel(b.target)
        reviews_a, reviews_b = ReviewClient(waiting), ReviewClient(deciding)
        started = review_pb2_grpc.ReviewServiceStub(deciding).StartReview(start_request("T-1"), timeout=15)
        operation_id = started.proposal.operation_id
        answers: list[object] = []
        waiter = threading.Thread(
            target=lambda: answers.append(reviews_a.wait_for_outcome(operation_id, timeout=120)), daemon=True
        )
        waiter.start()
        time.sleep(1)
        a.kill()  # the waiter's orchestrator dies; the decision is made on the other replica meanwhile
        reviews_b.approve(operation_id)
        time.sleep(1)
        assert not answers
        a2 = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "orchestrator-a2", extra=["--address", address])
        processes.append(a2)
        waiter.join(120)
        [answer] = answers
        assert answer.state is OperationState.COMMITTED  # type: ignore[attr-defined]
        waiting.close()
        deciding.close()
    finally:
        for process in reversed(processes):
            if process.process.poll() is None:
                process.stop()


def test_a_stopping_server_ends_its_streams_at_once(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    stack.stop_grace = 60.0
    stub = events_pb2_grpc.EventServiceStub(stack._channel(stack.orchestrator_port))
    stream: Any = stub.WatchEvents(events_pb2.WatchEventsRequest(), timeout=120)
    assert next(stream).HasField("heartbeat")
    stack.stop_orchestrator()
    with pytest.raises(grpc.RpcError) as ended:
        next(stream)
    # Ended by the feed as the server began to stop (a watcher reconnects elsewhere), not cut at the grace's end.
    assert ended.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in (ended.value.details() or "")


def test_a_watcher_that_hangs_up_is_logged_as_cancelled_not_as_a_server_fault(
    make_stack: Callable[..., Stack], caplog: pytest.LogCaptureFixture
) -> None:
    stack = make_stack()
    _approved_case(stack, "T-1")
    client = EventsClient(stack._channel(stack.orchestrator_port))
    for _ in range(5):
        stream = client.watch(start_index=1)
        assert isinstance(next(stream), EventView)
        stream.close()
    # Each call's access line is written when the server sees it end; wait for all five (no stop in between:
    # a stopping server ends what is still open itself, as UNAVAILABLE).
    deadline = time.monotonic() + 30
    while True:
        lines = [r for r in caplog.records if r.name == "decisionflow.access" and "WatchEvents" in r.getMessage()]
        if len(lines) >= 5 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(lines) == 5
    assert all("CANCELLED" in r.getMessage() and r.levelname == "WARNING" for r in lines)
