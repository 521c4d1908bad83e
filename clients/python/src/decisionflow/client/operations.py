"""OperationsClient and AsyncOperationsClient: the orchestrator's operator API, as the reconciler
uses it. Both build the same requests and read the same responses; only the call differs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from datetime import timedelta
from functools import cached_property

from google.protobuf import duration_pb2

from decisionflow import vocabulary_wire as wire
from decisionflow.client import _convert as convert
from decisionflow.client._calls import AsyncClient, Client, call, call_async
from decisionflow.client.views import (
    OperationPage,
    OperationState,
    OperationView,
    RedriveResult,
    Settlement,
    SettleResult,
)
from decisionflow.v1 import operations_pb2, operations_pb2_grpc


def _list_request(
    states: Iterable[OperationState],
    min_age: timedelta | None,
    page_size: int,
    case_id: str | None,
    page_token: str = "",
    include_total_size: bool = False,
) -> operations_pb2.ListOperationsRequest:
    request = operations_pb2.ListOperationsRequest(
        states=[wire.state_to_pb(s) for s in states],
        page_size=page_size,
        page_token=page_token,
        case_id=case_id,
        include_total_size=include_total_size,
    )
    if min_age is not None:
        age = duration_pb2.Duration()
        age.FromTimedelta(min_age)
        request.min_age.CopyFrom(age)
    return request


def _page(response: operations_pb2.ListOperationsResponse) -> OperationPage:
    total = response.total_size if response.HasField("total_size") else None
    return OperationPage(tuple(convert.operation(o) for o in response.operations), response.next_page_token, total)


def _settle_request(settlement: Settlement) -> operations_pb2.SettleOperationRequest:
    return operations_pb2.SettleOperationRequest(settlement=convert.settlement_to_pb(settlement))


def _batch_settle_request(settlements: Sequence[Settlement]) -> operations_pb2.BatchSettleOperationsRequest:
    return operations_pb2.BatchSettleOperationsRequest(settlements=[convert.settlement_to_pb(s) for s in settlements])


def _settle_results(response: operations_pb2.BatchSettleOperationsResponse) -> tuple[SettleResult, ...]:
    return tuple(convert.settle_result(r) for r in response.results)


def _redrive_request(operation_id: str) -> operations_pb2.RedriveOperationRequest:
    return operations_pb2.RedriveOperationRequest(operation_id=operation_id)


def _redrive_result(response: operations_pb2.RedriveOperationResponse) -> RedriveResult:
    return RedriveResult(wire.outcome_from_pb(response.outcome), convert.operation(response.operation))


class OperationsClient(Client):
    """Synchronous client of OperationsService: list open operations, record lookups, re-drive.

    Every call is safe to retry: a settlement records an observation (recording it twice
    changes nothing), and a re-drive calls Apply with the same operation id and stored payload.
    """

    @cached_property
    def _stub(self) -> operations_pb2_grpc.OperationsServiceStub:
        return operations_pb2_grpc.OperationsServiceStub(self._channel)

    def list_operations(
        self,
        states: Iterable[OperationState] = (),
        *,
        min_age: timedelta | None = None,
        page_size: int = 0,
        case_id: str | None = None,
    ) -> Iterator[OperationView]:
        """Yield operations in states (empty: APPROVED and UNKNOWN) at least min_age old, of case_id when
        given, oldest first.

        Pages are fetched as the iterator advances; each page call is retried on its own.
        """
        request = _list_request(states, min_age, page_size, case_id)
        while True:
            response = call(self._stub.ListOperations, request, self._settings)
            yield from (convert.operation(o) for o in response.operations)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token

    def list_operations_page(
        self,
        states: Iterable[OperationState] = (),
        *,
        min_age: timedelta | None = None,
        page_size: int = 0,
        page_token: str = "",
        case_id: str | None = None,
        include_total_size: bool = False,
    ) -> OperationPage:
        """Return one page of list_operations' operations, for a console that pages: pass the page's
        next_page_token back (with the same states, age and case) for the next page.

        include_total_size: the page's total_size says how many operations match over every page (a
        count the orchestrator makes on each such call; leave it off to page through everything)."""
        request = _list_request(states, min_age, page_size, case_id, page_token, include_total_size)
        return _page(call(self._stub.ListOperations, request, self._settings))

    def settle_operation(self, settlement: Settlement) -> SettleResult:
        """Record what one lookup showed; settled is True when this call moved the operation to COMMITTED."""
        return convert.settle_result(call(self._stub.SettleOperation, _settle_request(settlement), self._settings))

    def batch_settle_operations(self, settlements: Sequence[Settlement]) -> tuple[SettleResult, ...]:
        """Record many lookups (at most 1,000) in one call; results come in request order."""
        request = _batch_settle_request(settlements)
        return _settle_results(call(self._stub.BatchSettleOperations, request, self._settings))

    def redrive_operation(self, operation_id: str) -> RedriveResult:
        """Call Apply again for an APPROVED or UNKNOWN operation with its stored payload; UNKNOWN is returned."""
        return _redrive_result(call(self._stub.RedriveOperation, _redrive_request(operation_id), self._settings))


class AsyncOperationsClient(AsyncClient):
    """asyncio client of OperationsService on a ``grpc.aio`` channel: the methods, deadlines, retry
    policy, typed errors and ``definite`` flag of ``OperationsClient``, awaited."""

    @cached_property
    def _stub(self) -> operations_pb2_grpc.OperationsServiceAsyncStub:
        return operations_pb2_grpc.OperationsServiceStub(self._channel)

    async def list_operations(
        self,
        states: Iterable[OperationState] = (),
        *,
        min_age: timedelta | None = None,
        page_size: int = 0,
        case_id: str | None = None,
    ) -> AsyncIterator[OperationView]:
        """Yield operations in states (empty: APPROVED and UNKNOWN) at least min_age old, of case_id when
        given, oldest first; pages are fetched as the iterator advances, each retried on its own."""
        request = _list_request(states, min_age, page_size, case_id)
        while True:
            response = await call_async(self._stub.ListOperations, request, self._settings)
            for operation in response.operations:
                yield convert.operation(operation)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token

    async def list_operations_page(
        self,
        states: Iterable[OperationState] = (),
        *,
        min_age: timedelta | None = None,
        page_size: int = 0,
        page_token: str = "",
        case_id: str | None = None,
        include_total_size: bool = False,
    ) -> OperationPage:
        """Return one page of list_operations' operations, for a console that pages: pass the page's
        next_page_token back (with the same states, age and case) for the next page.

        include_total_size: the page's total_size says how many operations match over every page (a
        count the orchestrator makes on each such call; leave it off to page through everything)."""
        request = _list_request(states, min_age, page_size, case_id, page_token, include_total_size)
        return _page(await call_async(self._stub.ListOperations, request, self._settings))

    async def settle_operation(self, settlement: Settlement) -> SettleResult:
        """Record what one lookup showed; settled is True when this call moved the operation to COMMITTED."""
        response = await call_async(self._stub.SettleOperation, _settle_request(settlement), self._settings)
        return convert.settle_result(response)

    async def batch_settle_operations(self, settlements: Sequence[Settlement]) -> tuple[SettleResult, ...]:
        """Record many lookups (at most 1,000) in one call; results come in request order."""
        request = _batch_settle_request(settlements)
        return _settle_results(await call_async(self._stub.BatchSettleOperations, request, self._settings))

    async def redrive_operation(self, operation_id: str) -> RedriveResult:
        """Call Apply again for an APPROVED or UNKNOWN operation with its stored payload; UNKNOWN is returned."""
        request = _redrive_request(operation_id)
        return _redrive_result(await call_async(self._stub.RedriveOperation, request, self._settings))
