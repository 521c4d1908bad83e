"""The EffectReceiverService servicer: proto to domain and back; every refusal goes through STATUS_TABLE."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import grpc
from google.protobuf import duration_pb2

from decisionflow.auth import AUTH_STATUS
from decisionflow.rpc_errors import StatusTable
from decisionflow.timestamps import from_timestamp, to_timestamp
from decisionflow.v1 import common_pb2, effect_receiver_pb2, effect_receiver_pb2_grpc
from effect_receiver.domain import AppliedEffect, ApplyOutcome, Consistency, LookupAnswer, Receipt
from effect_receiver.errors import (
    FieldViolation,
    IdempotencyKeyReused,
    InvalidRequest,
    KeyRetentionExceeded,
    ReplyLost,
    Unavailable,
)
from effect_receiver.service import ReceiverService

SERVICE_NAME = effect_receiver_pb2.DESCRIPTOR.services_by_name["EffectReceiverService"].full_name

STATUS_TABLE: StatusTable = {
    **AUTH_STATUS,
    InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    IdempotencyKeyReused: grpc.StatusCode.FAILED_PRECONDITION,
    KeyRetentionExceeded: grpc.StatusCode.FAILED_PRECONDITION,
    ReplyLost: grpc.StatusCode.UNAVAILABLE,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
}

_APPLY_RESULTS = {
    ApplyOutcome.CREATED: effect_receiver_pb2.APPLY_RESULT_CREATED,
    ApplyOutcome.REPLAYED: effect_receiver_pb2.APPLY_RESULT_REPLAYED,
}
_CONSISTENCIES = {
    Consistency.STRONG: common_pb2.CONSISTENCY_STRONG,
    Consistency.EVENTUAL: common_pb2.CONSISTENCY_EVENTUAL,
}

Context = grpc.aio.ServicerContext[Any, Any]


def receipt_message(receipt: Receipt) -> common_pb2.Receipt:
    """Return the wire form of a receipt."""
    return common_pb2.Receipt(
        receipt_id=receipt.receipt_id,
        operation_id=receipt.operation_id,
        applied_at=to_timestamp(receipt.applied_at),
    )


def _lookup_result(answer: LookupAnswer) -> effect_receiver_pb2.LookupResult:
    result = effect_receiver_pb2.LookupResult(
        operation_id=answer.operation_id,
        status=common_pb2.LOOKUP_STATUS_APPLIED if answer.applied else common_pb2.LOOKUP_STATUS_NOT_FOUND,
        consistency=_CONSISTENCIES[answer.consistency],
        observed_at=to_timestamp(answer.observed_at),
    )
    if answer.receipt is not None:
        result.receipt.CopyFrom(receipt_message(answer.receipt))
    return result


def _first_attempted_at(request: effect_receiver_pb2.ApplyRequest) -> datetime | None:
    if not request.HasField("first_attempted_at"):
        return None  # an older caller: the retention check cannot be made
    try:
        return from_timestamp(request.first_attempted_at)
    except ValueError as exc:
        raise InvalidRequest([FieldViolation("first_attempted_at", "not a valid time (years 1 to 9999)")]) from exc


def _effect_message(effect: AppliedEffect) -> effect_receiver_pb2.Effect:
    return effect_receiver_pb2.Effect(
        operation_id=effect.operation_id,
        case_id=effect.case_id,
        kind=effect.kind,
        payload_digest=effect.payload_digest,
        receipt=receipt_message(effect.receipt),
        reviewer=effect.reviewer,
        body=effect.body,
    )


class EffectReceiverServicer(effect_receiver_pb2_grpc.EffectReceiverServiceServicer):
    """Serves EffectReceiverService; store work runs in worker threads so the event loop stays free."""

    def __init__(self, service: ReceiverService) -> None:
        self._service = service
        self._retention: duration_pb2.Duration | None = None
        if service.key_retention is not None:
            self._retention = duration_pb2.Duration()
            self._retention.FromTimedelta(service.key_retention)

    def _advertise(self, response: Any) -> None:
        # Every response carries the retention, so a caller knows when a re-drive stops being safe.
        if self._retention is not None:
            response.key_retention.CopyFrom(self._retention)

    async def Apply(
        self, request: effect_receiver_pb2.ApplyRequest, context: Context
    ) -> effect_receiver_pb2.ApplyResponse:
        """Write the effect once; CREATED or REPLAYED with the original receipt."""
        answer = await asyncio.to_thread(
            self._service.apply,
            request.operation_id,
            request.case_id,
            request.kind,
            request.payload,
            request.payload_digest,
            _first_attempted_at(request),
        )
        response = effect_receiver_pb2.ApplyResponse(
            result=_APPLY_RESULTS[answer.outcome], receipt=receipt_message(answer.receipt)
        )
        self._advertise(response)
        return response

    async def Lookup(
        self, request: effect_receiver_pb2.LookupRequest, context: Context
    ) -> effect_receiver_pb2.LookupResponse:
        """Tell whether the effect of one operation id exists."""
        answer = await asyncio.to_thread(self._service.lookup, request.operation_id)
        response = effect_receiver_pb2.LookupResponse(result=_lookup_result(answer))
        self._advertise(response)
        return response

    async def BatchLookup(
        self, request: effect_receiver_pb2.BatchLookupRequest, context: Context
    ) -> effect_receiver_pb2.BatchLookupResponse:
        """Look up 1 to 1,000 operation ids; results in request order."""
        answers = await asyncio.to_thread(self._service.batch_lookup, list(request.operation_ids))
        response = effect_receiver_pb2.BatchLookupResponse(results=[_lookup_result(a) for a in answers])
        self._advertise(response)
        return response

    async def ListEffects(
        self, request: effect_receiver_pb2.ListEffectsRequest, context: Context
    ) -> effect_receiver_pb2.ListEffectsResponse:
        """List one page of a case's effects, oldest first."""
        page, next_token = await asyncio.to_thread(
            self._service.list_effects, request.case_id, request.page_size, request.page_token
        )
        response = effect_receiver_pb2.ListEffectsResponse(
            effects=[_effect_message(effect) for effect in page.effects], next_page_token=next_token
        )
        self._advertise(response)
        return response


def register(servicer: EffectReceiverServicer) -> Callable[[grpc.aio.Server], Sequence[str]]:
    """Return a start_server register callback that adds servicer and names its service."""

    def add(server: grpc.aio.Server) -> tuple[str, ...]:
        effect_receiver_pb2_grpc.add_EffectReceiverServiceServicer_to_server(servicer, server)
        return (SERVICE_NAME,)

    return add
