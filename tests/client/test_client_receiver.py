"""ReceiverClient and AsyncReceiverClient against a scripted EffectReceiverService."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import grpc
import pytest
from google.protobuf import duration_pb2

from decisionflow import reasons
from decisionflow.channels import aio_insecure_channel, insecure_channel
from decisionflow.client import (
    AppliedEffect,
    ApplyResult,
    AsyncReceiverClient,
    Consistency,
    DecisionflowError,
    EffectRecord,
    IdempotencyKeyReused,
    LookupAnswer,
    LookupStatus,
    ReceiverClient,
    errors,
)
from decisionflow.retry import ORCHESTRATOR_TO_RECEIVER, RetryPolicy
from decisionflow.v1 import common_pb2, effect_receiver_pb2
from decisionflow_server.foundation.errors import DomainError
from tests.support.payloads import apply_request, effect_request, sample_payload
from tests.support.stack import Stack

from .client_standin import Fail, FakeClock, Sleeps, StandIn, standin

OP = "op-v1-" + "3" * 64
OP2 = "op-v1-" + "4" * 64
PAYLOAD = sample_payload(OP).encode()
DIGEST = sample_payload(OP).digest()
SLACK = 0.05  # the grpc-timeout header is rounded up, so the server may see a little more


class Refusal(DomainError):
    """A server-side refusal with a reason and metadata."""

    def __init__(self, reason: str, metadata: dict[str, str] | None = None) -> None:
        super().__init__(f"refused: {reason}", metadata=metadata)
        self.reason = reason


def created(
    result: effect_receiver_pb2.ApplyResult.ValueType = effect_receiver_pb2.APPLY_RESULT_CREATED,
) -> effect_receiver_pb2.ApplyResponse:
    return effect_receiver_pb2.ApplyResponse(
        result=result, receipt=common_pb2.Receipt(receipt_id="rcpt-7", operation_id=OP)
    )


@pytest.fixture
def server() -> Iterator[StandIn]:
    with standin() as running:
        yield running


def apply_async(server: StandIn, client_kwargs: dict[str, object], deadline_in: float) -> AppliedEffect:
    """Run one AsyncReceiverClient.apply against server; deadline_in is seconds from the client clock's now."""

    async def run() -> AppliedEffect:
        async with aio_insecure_channel(server.target) as channel:
            client = AsyncReceiverClient(channel, **client_kwargs)  # type: ignore[arg-type]
            clock = client_kwargs.get("clock", time.monotonic)
            assert callable(clock)
            deadline = clock() + deadline_in
            return await client.apply(effect_request(OP, "T-1042", PAYLOAD, DIGEST), deadline=deadline)

    return asyncio.run(run())


@pytest.mark.parametrize(
    "code",
    [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED],
)
def test_async_apply_retries_transient_failures_with_the_same_request(server: StandIn, code: grpc.StatusCode) -> None:
    server.script.then("Apply", Fail(code), Fail(code), created(effect_receiver_pb2.APPLY_RESULT_REPLAYED))
    clock = FakeClock()
    sleeps = Sleeps(clock)

    result = apply_async(server, {"sleep": sleeps.async_sleep, "clock": clock}, deadline_in=10.0)

    calls = server.script.calls("Apply")
    assert len(calls) == 3
    assert {(c.request.operation_id, c.request.payload, c.request.payload_digest) for c in calls} == {
        (OP, PAYLOAD, DIGEST)
    }
    assert all(c.time_remaining is not None for c in calls)
    assert len(sleeps.waits) == 2
    for n, wait in enumerate(sleeps.waits, start=1):
        assert 0 <= wait <= ORCHESTRATOR_TO_RECEIVER.window(n)
    assert result.result is ApplyResult.REPLAYED
    assert result.receipt.receipt_id == "rcpt-7"
    assert result.key_retention is None


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidRequest),
        (grpc.StatusCode.FAILED_PRECONDITION, errors.PreconditionFailed),
        (grpc.StatusCode.ALREADY_EXISTS, errors.ServerError),
        (grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDenied),
        (grpc.StatusCode.UNAUTHENTICATED, errors.Unauthenticated),
        (grpc.StatusCode.NOT_FOUND, errors.NotFound),
    ],
)
def test_async_apply_raises_a_definite_refusal_at_once(
    server: StandIn, code: grpc.StatusCode, expected: type[DecisionflowError]
) -> None:
    server.script.then("Apply", Fail(code))
    sleeps = Sleeps()

    with pytest.raises(expected) as raised:
        apply_async(server, {"sleep": sleeps.async_sleep}, deadline_in=10.0)

    assert raised.value.definite is True
    assert len(server.script.calls("Apply")) == 1
    assert sleeps.waits == []


def test_a_reused_key_is_a_definite_refusal_naming_the_key(server: StandIn) -> None:
    refusal = Refusal(reasons.IDEMPOTENCY_KEY_REUSED, {reasons.OPERATION_ID: OP})
    server.script.then("Apply", Fail(grpc.StatusCode.FAILED_PRECONDITION, refusal))

    with pytest.raises(IdempotencyKeyReused) as raised:
        apply_async(server, {"sleep": Sleeps().async_sleep}, deadline_in=10.0)

    assert raised.value.definite is True
    assert raised.value.operation_id == OP


def test_async_apply_gives_up_before_the_deadline_and_is_indeterminate(server: StandIn) -> None:
    server.script.then("Apply", *[Fail(grpc.StatusCode.UNAVAILABLE)] * 100)
    clock = FakeClock()
    sleeps = Sleeps(clock)
    deadline_in = 1.5
    # Attempt and total-time limits far away, so the deadline is what ends the retries.
    patient = RetryPolicy("test_patient", 1000, 3600.0, initial_backoff=0.05, max_backoff=0.4, multiplier=2.0)

    with pytest.raises(errors.Unavailable) as raised:
        apply_async(server, {"sleep": sleeps.async_sleep, "clock": clock, "policy": patient}, deadline_in=deadline_in)

    deadline = 1000.0 + deadline_in
    assert sleeps.waits, "the deadline left room for retries"
    for started, wait in zip(sleeps.started_at, sleeps.waits, strict=True):
        assert started + wait < deadline
    assert len(server.script.calls("Apply")) == len(sleeps.waits) + 1 == raised.value.attempts
    assert sum(sleeps.waits) > deadline_in - patient.max_backoff  # it used the time it had
    assert raised.value.definite is False


@pytest.mark.parametrize(
    ("after_retry", "definite"),
    [
        (Fail(grpc.StatusCode.PERMISSION_DENIED), False),
        (Fail(grpc.StatusCode.NOT_FOUND), False),
        (Fail(grpc.StatusCode.INVALID_ARGUMENT), True),
        (Fail(grpc.StatusCode.FAILED_PRECONDITION, Refusal(reasons.IDEMPOTENCY_KEY_REUSED)), True),
    ],
)
def test_a_refusal_after_an_indeterminate_attempt(server: StandIn, after_retry: Fail, definite: bool) -> None:
    # The first attempt may have written the effect; only a refusal about the request's bytes
    # proves it did not.
    server.script.then("Apply", Fail(grpc.StatusCode.UNAVAILABLE), after_retry)

    with pytest.raises(DecisionflowError) as raised:
        apply_async(server, {"sleep": Sleeps().async_sleep}, deadline_in=10.0)

    assert raised.value.code is after_retry.code
    assert raised.value.attempts == 2
    assert raised.value.definite is definite


def test_each_apply_attempt_carries_at_most_the_time_left(server: StandIn) -> None:
    server.script.then("Apply", Fail(grpc.StatusCode.RESOURCE_EXHAUSTED))
    slow = RetryPolicy("test_slow", 3, 30.0, initial_backoff=0.4, max_backoff=0.4, multiplier=1.0)
    clock = FakeClock()
    sleeps = Sleeps(clock)

    apply_async(server, {"timeout": 30.0, "policy": slow, "sleep": sleeps.async_sleep, "clock": clock}, 1.0)

    first, second = server.script.calls("Apply")
    (waited,) = sleeps.waits
    assert waited >= 0.2  # RESOURCE_EXHAUSTED: at least half the window
    assert first.time_remaining is not None and second.time_remaining is not None
    assert first.time_remaining <= 1.0 + SLACK
    assert second.time_remaining <= 1.0 - waited + SLACK


def test_a_server_that_hangs_past_the_deadline_is_indeterminate(server: StandIn) -> None:
    server.script.then("Apply", *[Fail(grpc.StatusCode.INTERNAL, hold=5.0)] * 5)

    # DEADLINE_EXCEEDED, not the INTERNAL the server answers once its hold ends: the client gave up at its
    # deadline instead of waiting the server out.
    with pytest.raises(errors.DeadlineExceeded) as raised:
        apply_async(server, {"timeout": 5.0}, deadline_in=0.3)

    assert raised.value.definite is False


def test_other_server_failures_are_indeterminate(server: StandIn) -> None:
    server.script.then("Apply", Fail(grpc.StatusCode.INTERNAL))

    with pytest.raises(errors.ServerError) as raised:
        apply_async(server, {}, deadline_in=10.0)

    assert raised.value.definite is False
    assert len(server.script.calls("Apply")) == 1


def lookup_result(operation_id: str, status: common_pb2.LookupStatus.ValueType) -> effect_receiver_pb2.LookupResult:
    receipt = common_pb2.Receipt(receipt_id=f"rcpt-{operation_id[-1]}", operation_id=operation_id)
    return effect_receiver_pb2.LookupResult(
        operation_id=operation_id,
        status=status,
        receipt=receipt if status == common_pb2.LOOKUP_STATUS_APPLIED else None,
        consistency=common_pb2.CONSISTENCY_STRONG,
    )


def batch_answer(request: effect_receiver_pb2.BatchLookupRequest) -> effect_receiver_pb2.BatchLookupResponse:
    statuses = {OP: common_pb2.LOOKUP_STATUS_APPLIED}
    return effect_receiver_pb2.BatchLookupResponse(
        results=[lookup_result(i, statuses.get(i, common_pb2.LOOKUP_STATUS_NOT_FOUND)) for i in request.operation_ids],
        key_retention=duration_pb2.Duration(seconds=86_400),
    )


def test_async_batch_lookup_answers_in_request_order(server: StandIn) -> None:
    server.script.then("BatchLookup", Fail(grpc.StatusCode.UNAVAILABLE))
    server.script.answer("BatchLookup", batch_answer)
    server.script.answer(
        "Lookup", effect_receiver_pb2.LookupResponse(result=lookup_result(OP, common_pb2.LOOKUP_STATUS_APPLIED))
    )

    async def run() -> tuple[object, ...]:
        async with aio_insecure_channel(server.target) as channel:
            client = AsyncReceiverClient(channel, sleep=Sleeps().async_sleep)
            batch = await client.batch_lookup([OP2, OP])
            single = await client.lookup(OP)
            return batch.results, batch.key_retention, single

    results, retention, single = asyncio.run(run())

    assert isinstance(single, LookupAnswer)
    assert single.status is LookupStatus.APPLIED

    assert isinstance(results, tuple)
    assert [(r.operation_id, r.status) for r in results] == [
        (OP2, LookupStatus.NOT_FOUND),
        (OP, LookupStatus.APPLIED),
    ]
    assert results[0].receipt is None
    assert results[1].receipt is not None
    assert retention == timedelta(days=1)
    assert len(server.script.calls("BatchLookup")) == 2
    assert all(c.time_remaining is not None for c in server.script.calls("Lookup"))


def test_sync_apply_lookup_and_batch(server: StandIn) -> None:
    server.script.then("Apply", Fail(grpc.StatusCode.UNAVAILABLE), created())
    server.script.answer(
        "Lookup", effect_receiver_pb2.LookupResponse(result=lookup_result(OP, common_pb2.LOOKUP_STATUS_APPLIED))
    )
    server.script.answer("BatchLookup", batch_answer)
    sleeps = Sleeps()

    with insecure_channel(server.target) as channel:
        client = ReceiverClient(channel, sleep=sleeps)
        applied = client.apply(effect_request(OP, "T-1042", PAYLOAD, DIGEST))
        found = client.lookup(OP)
        batch = client.batch_lookup([OP, OP2])

    assert applied.result is ApplyResult.CREATED
    assert len(server.script.calls("Apply")) == 2
    assert len(sleeps.waits) == 1
    assert found.status is LookupStatus.APPLIED
    assert found.consistency is Consistency.STRONG
    assert found.receipt is not None and found.receipt.receipt_id == "rcpt-3"
    assert [r.status for r in batch.results] == [LookupStatus.APPLIED, LookupStatus.NOT_FOUND]
    for method in ("Apply", "Lookup", "BatchLookup"):
        assert all(c.time_remaining is not None for c in server.script.calls(method))


def _listed_effect(operation_id: str) -> effect_receiver_pb2.Effect:
    return effect_receiver_pb2.Effect(
        operation_id=operation_id,
        case_id="T-1042",
        receipt=common_pb2.Receipt(receipt_id="r-" + operation_id[-1], operation_id=operation_id),
    )


def _two_pages_with_a_failure_between(server: StandIn) -> None:
    server.script.then(
        "ListEffects",
        effect_receiver_pb2.ListEffectsResponse(effects=[_listed_effect(OP)], next_page_token="page-2"),
        Fail(grpc.StatusCode.UNAVAILABLE),
        effect_receiver_pb2.ListEffectsResponse(effects=[_listed_effect(OP2)]),
    )


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_list_effects_follows_page_tokens(server: StandIn, kind: str) -> None:
    _two_pages_with_a_failure_between(server)

    if kind == "sync":
        with insecure_channel(server.target) as channel:
            effects = list(ReceiverClient(channel, sleep=Sleeps()).list_effects("T-1042", page_size=1))
    else:

        async def listed() -> list[EffectRecord]:
            async with aio_insecure_channel(server.target) as channel:
                client = AsyncReceiverClient(channel, sleep=Sleeps().async_sleep)
                return [e async for e in client.list_effects("T-1042", page_size=1)]

        effects = asyncio.run(listed())

    assert [e.operation_id for e in effects] == [OP, OP2]
    assert [e.receipt.receipt_id for e in effects] == ["r-3", "r-4"]
    sent = [(c.request.case_id, c.request.page_size, c.request.page_token) for c in server.script.calls("ListEffects")]
    assert sent == [("T-1042", 1, ""), ("T-1042", 1, "page-2"), ("T-1042", 1, "page-2")]


def test_async_list_effects_reads_what_a_real_receiver_holds_as_the_sync_client_does(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack()
    operation_ids = ["op-v1-" + str(n) * 64 for n in (5, 6, 7)]
    for operation_id in operation_ids:
        stack.receiver().Apply(apply_request(operation_id, case_id="T-9"), timeout=10)
    target = f"127.0.0.1:{stack.receiver_port}"

    async def listed() -> list[EffectRecord]:
        async with aio_insecure_channel(target) as channel:
            return [e async for e in AsyncReceiverClient(channel).list_effects("T-9", page_size=2)]

    with insecure_channel(target) as channel:
        expected = list(ReceiverClient(channel).list_effects("T-9", page_size=2))
    assert [e.operation_id for e in expected] == operation_ids
    assert asyncio.run(listed()) == expected
