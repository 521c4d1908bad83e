"""The EffectReceiverService servicer: proto to domain and back; every refusal goes through STATUS_TABLE."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from google.protobuf import duration_pb2

from decisionflow import vocabulary_wire as wire
from decisionflow.timestamps import to_timestamp
from decisionflow.v1 import effect_receiver_pb2, effect_receiver_pb2_grpc
from decisionflow.vocabulary import CaseId, EffectRequest, LookupStatus, OperationId
from decisionflow_server.runtime.auth import AUTH_STATUS
from decisionflow_server.runtime.rpc_errors import StatusTable, status_table
from effect_receiver.domain import AppliedEffect, LookupAnswer
from effect_receiver.errors import FieldViolation, InvalidRequest, KeyRetentionExceeded, ReceiverError, Unavailable
from effect_receiver.service import ReceiverService

SERVICE_NAME = effect_receiver_pb2.DESCRIPTOR.services_by_name["EffectReceiverService"].full_name

# Every refusal of this server: the shared ones and the receiver's own (effect_receiver.errors).
STATUS_TABLE: StatusTable = {
    **AUTH_STATUS,
    **status_table(InvalidRequest, Unavailable, KeyRetentionExceeded, ReceiverError),
}

Context = grpc.aio.ServicerContext[Any, Any]


def _lookup_result(answer: LookupAnswer) -> effect_receiver_pb2.LookupResult:
    result = effect_receiver_pb2.LookupResult(
        operation_id=answer.operation_id,
        status=wire.lookup_status_to_pb(LookupStatus.APPLIED if answer.applied else LookupStatus.NOT_FOUND),
        consistency=wire.consistency_to_pb(answer.consistency),
        observed_at=to_timestamp(answer.observed_at),
    )
    if answer.receipt is not None:
        result.receipt.CopyFrom(wire.receipt_to_pb(answer.receipt))
    return result


def _effect_request(message: effect_receiver_pb2.ApplyRequest) -> EffectRequest:
    # Without first_attempted_at (an older caller) the retention check cannot be made.
    try:
        return wire.effect_request_from_pb(message)
    except ValueError as exc:
        raise InvalidRequest([FieldViolation("first_attempted_at", "not a valid time (years 1 to 9999)")]) from exc


def _effect_message(effect: AppliedEffect) -> effect_receiver_pb2.Effect:
    return effect_receiver_pb2.Effect(
        operation_id=effect.operation_id,
        case_id=effect.case_id,
        kind=effect.kind,
        payload_digest=effect.payload_digest,
        receipt=wire.receipt_to_pb(effect.receipt),
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
        answer = await asyncio.to_thread(self._service.apply, _effect_request(request))
        response = effect_receiver_pb2.ApplyResponse(
            result=wire.apply_result_to_pb(answer.outcome), receipt=wire.receipt_to_pb(answer.receipt)
        )
        self._advertise(response)
        return response

    async def Lookup(
        self, request: effect_receiver_pb2.LookupRequest, context: Context
    ) -> effect_receiver_pb2.LookupResponse:
        """Tell whether the effect of one operation id exists."""
        answer = await asyncio.to_thread(self._service.lookup, OperationId(request.operation_id))
        response = effect_receiver_pb2.LookupResponse(result=_lookup_result(answer))
        self._advertise(response)
        return response

    async def BatchLookup(
        self, request: effect_receiver_pb2.BatchLookupRequest, context: Context
    ) -> effect_receiver_pb2.BatchLookupResponse:
        """Look up 1 to 1,000 operation ids; results in request order."""
        answers = await asyncio.to_thread(self._service.batch_lookup, [OperationId(o) for o in request.operation_ids])
        response = effect_receiver_pb2.BatchLookupResponse(results=[_lookup_result(a) for a in answers])
        self._advertise(response)
        return response

    async def ListEffects(
        self, request: effect_receiver_pb2.ListEffectsRequest, context: Context
    ) -> effect_receiver_pb2.ListEffectsResponse:
        """List one page of a case's effects, oldest first."""
        page, next_token = await asyncio.to_thread(
            self._service.list_effects, CaseId(request.case_id), request.page_size, request.page_token
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
