"""AsyncReviewClient and AsyncOperationsClient against a scripted service on a real gRPC server:
the synchronous clients' methods, deadlines, retry policy, typed errors and definite flag, awaited."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import grpc
import pytest

from decisionflow import reasons
from decisionflow.channels import aio_insecure_channel
from decisionflow.client import (
    AsyncOperationsClient,
    AsyncReviewClient,
    DeadlineExceeded,
    OperationsClient,
    OperationState,
    Outcome,
    ReviewClient,
    StaleProposal,
    Unavailable,
)
from decisionflow.client._calls import AsyncClient
from decisionflow.retry import CLIENT_DEFAULT, RetryPolicy
from decisionflow.v1 import common_pb2, operations_pb2, review_pb2

from .client_standin import Fail, Sleeps, StandIn, standin
from .test_client_review import (
    ACTION,
    BODY,
    CASE,
    EDITED_BODY,
    EDITED_OP,
    EVIDENCE,
    OP,
    POLICY,
    SLACK,
    Refusal,
    approved,
    edited_proposal,
    stale,
)

_T = TypeVar("_T")


@pytest.fixture
def server() -> Iterator[StandIn]:
    with standin() as running:
        yield running


def run_review(server: StandIn, use: Callable[[AsyncReviewClient], Awaitable[_T]], **kwargs: Any) -> _T:
    """Run use(client) on a fresh asyncio channel to server."""

    async def run() -> _T:
        async with aio_insecure_channel(server.target) as channel:
            return await use(AsyncReviewClient(channel, **kwargs))

    return asyncio.run(run())


def run_operations(server: StandIn, use: Callable[[AsyncOperationsClient], Awaitable[_T]], **kwargs: Any) -> _T:
    """Run use(client) on a fresh asyncio channel to server."""

    async def run() -> _T:
        async with aio_insecure_channel(server.target) as channel:
            return await use(AsyncOperationsClient(channel, **kwargs))

    return asyncio.run(run())


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(f) for name, f in vars(cls).items() if callable(f) and not name.startswith("_")}


@pytest.mark.parametrize(
    ("sync", "aio"), [(ReviewClient, AsyncReviewClient), (OperationsClient, AsyncOperationsClient)]
)
def test_each_async_client_has_the_sync_clients_methods_and_parameters(sync: type, aio: type[AsyncClient]) -> None:
    sync_methods, aio_methods = _public(sync), _public(aio)

    assert sorted(aio_methods) == sorted(sync_methods)
    for name, signature in sync_methods.items():
        assert list(aio_methods[name].parameters) == list(signature.parameters), name
        assert inspect.iscoroutinefunction(getattr(aio, name)) or inspect.isasyncgenfunction(getattr(aio, name))
    init, sync_init = inspect.signature(aio).parameters, inspect.signature(sync).parameters
    assert init["timeout"].default == sync_init["timeout"].default == 5.0
    assert aio.default_policy is sync_init["policy"].default is CLIENT_DEFAULT


def test_async_approve_is_retried_with_the_same_operation_id_and_a_deadline_each_time(server: StandIn) -> None:
    server.script.then(
        "Approve", Fail(grpc.StatusCode.UNAVAILABLE), Fail(grpc.StatusCode.DEADLINE_EXCEEDED), approved(replay=True)
    )
    sleeps = Sleeps()

    result = run_review(server, lambda client: client.approve(OP), timeout=2.0, sleep=sleeps.async_sleep)

    calls = server.script.calls("Approve")
    assert [(c.request.operation_id, c.request.decision) for c in calls] == [(OP, common_pb2.DECISION_APPROVE)] * 3
    assert all(c.time_remaining is not None and 0 < c.time_remaining <= 2.0 + SLACK for c in calls)
    assert len(sleeps.waits) == 2
    assert result.outcome is Outcome.COMMITTED and result.replay is True


def test_async_every_review_method_sends_a_deadline(server: StandIn) -> None:
    server.script.answer("GetProposal", edited_proposal(parent=OP))

    async def every(client: AsyncReviewClient) -> None:
        await client.start_review(CASE, ACTION, BODY, EVIDENCE, POLICY)
        await client.get_proposal(case_id=CASE)
        await client.edit_proposal(OP, BODY, EVIDENCE, POLICY)
        await client.decline(OP)
        await client.get_operation(OP)

    run_review(server, every, timeout=2.0)

    for method in ("StartReview", "GetProposal", "EditProposal", "Approve", "GetOperation"):
        (call,) = server.script.calls(method)
        assert call.time_remaining is not None and 0 < call.time_remaining <= 2.0 + SLACK, method
    assert server.script.calls("Approve")[0].request.decision == common_pb2.DECISION_DECLINE


def test_an_async_unknown_outcome_is_returned_not_raised(server: StandIn) -> None:
    server.script.answer("Approve", approved(outcome=common_pb2.OUTCOME_UNKNOWN))

    assert run_review(server, lambda client: client.approve(OP)).outcome is Outcome.UNKNOWN


def test_an_async_stale_approval_is_a_definite_refusal_naming_the_current_operation(server: StandIn) -> None:
    server.script.then("Approve", stale(EDITED_OP))

    with pytest.raises(StaleProposal) as raised:
        run_review(server, lambda client: client.approve(OP), sleep=Sleeps().async_sleep)

    assert raised.value.definite is True
    assert raised.value.reason == reasons.STALE_PROPOSAL
    assert raised.value.current_operation_id == EDITED_OP
    assert len(server.script.calls("Approve")) == 1


def test_an_async_retried_edit_recognises_its_own_success(server: StandIn) -> None:
    server.script.then("EditProposal", Fail(grpc.StatusCode.UNAVAILABLE), stale(EDITED_OP))
    server.script.answer("GetProposal", edited_proposal(parent=OP))

    result = run_review(
        server, lambda client: client.edit_proposal(OP, EDITED_BODY, EVIDENCE, POLICY), sleep=Sleeps().async_sleep
    )

    assert result.proposal.operation_id == EDITED_OP and result.pending_review is None
    assert server.script.calls("GetProposal")[0].request.operation_id == EDITED_OP


def test_an_async_first_attempt_stale_edit_is_raised_without_a_lookup(server: StandIn) -> None:
    server.script.then("EditProposal", stale(EDITED_OP))

    with pytest.raises(StaleProposal):
        run_review(server, lambda client: client.edit_proposal(OP, EDITED_BODY, EVIDENCE, POLICY))
    assert server.script.calls("GetProposal") == []


def test_async_retries_that_run_out_are_indeterminate(server: StandIn) -> None:
    server.script.then("Approve", *[Fail(grpc.StatusCode.UNAVAILABLE)] * 5)
    policy = RetryPolicy("test_three", 3, 5.0, initial_backoff=0.01, max_backoff=0.01, multiplier=1.0)

    with pytest.raises(Unavailable) as raised:
        run_review(server, lambda client: client.approve(OP), policy=policy, sleep=Sleeps().async_sleep)

    assert raised.value.definite is False and raised.value.attempts == 3
    assert len(server.script.calls("Approve")) == 3


def test_an_async_hanging_server_ends_in_deadline_exceeded(server: StandIn) -> None:
    server.script.then("Approve", Fail(grpc.StatusCode.INTERNAL, hold=5.0), Fail(grpc.StatusCode.INTERNAL, hold=5.0))
    two = RetryPolicy("test_two", 2, 10.0, initial_backoff=0.01, max_backoff=0.01, multiplier=1.0)

    with pytest.raises(DeadlineExceeded) as raised:
        run_review(server, lambda client: client.approve(OP), timeout=0.2, policy=two, sleep=Sleeps().async_sleep)

    assert raised.value.attempts == 2 and raised.value.definite is False
    assert len(server.script.calls("Approve")) == 2


def test_async_list_operations_pages_lazily_with_the_filters(server: StandIn) -> None:
    ops = [review_pb2.Operation(operation_id=f"op-v1-{n}", state=common_pb2.OPERATION_STATE_UNKNOWN) for n in range(3)]
    server.script.then(
        "ListOperations",
        operations_pb2.ListOperationsResponse(operations=ops[:2], next_page_token="p2"),
        operations_pb2.ListOperationsResponse(operations=ops[2:]),
    )

    async def listed(client: AsyncOperationsClient) -> list[str]:
        return [o.operation_id async for o in client.list_operations([OperationState.UNKNOWN], case_id=CASE)]

    assert run_operations(server, listed) == [o.operation_id for o in ops]
    first, second = server.script.calls("ListOperations")
    assert list(first.request.states) == [common_pb2.OPERATION_STATE_UNKNOWN] and first.request.case_id == CASE
    assert (first.request.page_token, second.request.page_token) == ("", "p2")


def test_an_async_redrive_returns_an_unknown_outcome_and_a_refusal_is_typed(server: StandIn) -> None:
    server.script.then(
        "RedriveOperation",
        operations_pb2.RedriveOperationResponse(outcome=common_pb2.OUTCOME_UNKNOWN),
        Fail(
            grpc.StatusCode.FAILED_PRECONDITION,
            Refusal(reasons.NOT_REDRIVABLE, {reasons.OPERATION_ID: OP, reasons.STATE: "OPERATION_STATE_COMMITTED"}),
        ),
    )

    async def twice(client: AsyncOperationsClient) -> tuple[Outcome, OperationState, bool]:
        first = await client.redrive_operation(OP)
        try:
            await client.redrive_operation(OP)
        except Exception as error:  # the typed error's attributes are what is checked
            state, definite = error.state, error.definite  # type: ignore[attr-defined]
            return first.outcome, state, definite
        raise AssertionError("the second re-drive was not refused")

    assert run_operations(server, twice) == (Outcome.UNKNOWN, OperationState.COMMITTED, True)
