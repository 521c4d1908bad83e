"""Clients of the EffectReceiver: ReceiverClient (sync) and AsyncReceiverClient (asyncio).

Apply is keyed by the operation id, so repeating it with the same payload is safe: the
receiver replays the original receipt. A failure is raised as a typed error whose
``definite`` attribute tells the orchestrator what it may record: True means the receiver
certainly wrote nothing (REJECTED); False means the effect may exist (UNKNOWN, settled later
by a lookup).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from functools import cached_property

from decisionflow import vocabulary_wire as wire
from decisionflow.client import _convert as convert
from decisionflow.client._calls import AsyncClient, Client, call, call_async
from decisionflow.client.views import AppliedEffect, EffectRecord, LookupAnswer, LookupBatch
from decisionflow.retry import ORCHESTRATOR_TO_RECEIVER
from decisionflow.v1 import effect_receiver_pb2, effect_receiver_pb2_grpc
from decisionflow.vocabulary import EffectRequest


class ReceiverClient(Client):
    """Synchronous client of EffectReceiverService (operators, the reconciler, the demo)."""

    @cached_property
    def _stub(self) -> effect_receiver_pb2_grpc.EffectReceiverServiceStub:
        return effect_receiver_pb2_grpc.EffectReceiverServiceStub(self._channel)

    def apply(self, request: EffectRequest) -> AppliedEffect:
        """Write the effect of request.operation_id once; a repeat with the same payload replays the receipt.

        With request.first_attempted_at, a receiver with a key retention refuses (KeyRetentionExceeded)
        when the key is absent and may already have been pruned.
        """
        message = wire.effect_request_to_pb(request)
        return convert.applied_effect(call(self._stub.Apply, message, self._settings))

    def lookup(self, operation_id: str) -> LookupAnswer:
        """Return whether the effect of operation_id exists, and how fresh that answer is."""
        request = effect_receiver_pb2.LookupRequest(operation_id=operation_id)
        return convert.lookup_answer(call(self._stub.Lookup, request, self._settings).result)

    def batch_lookup(self, operation_ids: Sequence[str]) -> LookupBatch:
        """Look up many operation ids (at most 1,000) in one call; answers come in request order."""
        request = effect_receiver_pb2.BatchLookupRequest(operation_ids=list(operation_ids))
        return convert.lookup_batch(call(self._stub.BatchLookup, request, self._settings))

    def list_effects(self, case_id: str, *, page_size: int = 0) -> Iterator[EffectRecord]:
        """Yield the effects written for case_id, oldest first, fetching pages as it goes."""
        page_token = ""
        while True:
            request = effect_receiver_pb2.ListEffectsRequest(
                case_id=case_id, page_size=page_size, page_token=page_token
            )
            response = call(self._stub.ListEffects, request, self._settings)
            yield from (convert.effect(e) for e in response.effects)
            page_token = response.next_page_token
            if not page_token:
                return


class AsyncReceiverClient(AsyncClient):
    """asyncio client of EffectReceiverService, used by the orchestrator's commit step.

    ``apply`` retries transient failures with the same request until the caller's deadline
    (never starting a wait that would end after it), then raises. Check ``error.definite``:
    True is a definite refusal (nothing written); False is indeterminate (the effect may exist).

    With wait_for_ready (its default) a call made while the channel is reconnecting waits for
    the connection within its deadline rather than failing at once, so a receiver that comes
    back during a call is reached by that call. A receiver that stays away for the whole
    deadline still ends the call indeterminate (DEADLINE_EXCEEDED), never a definite answer.
    """

    default_policy = ORCHESTRATOR_TO_RECEIVER
    default_wait_for_ready = True

    @cached_property
    def _stub(self) -> effect_receiver_pb2_grpc.EffectReceiverServiceAsyncStub:
        return effect_receiver_pb2_grpc.EffectReceiverServiceStub(self._channel)

    async def apply(self, request: EffectRequest, *, deadline: float) -> AppliedEffect:
        """Write the effect of request.operation_id once, retrying until deadline (an absolute clock() time).

        With request.first_attempted_at, a receiver with a key retention refuses (KeyRetentionExceeded)
        when the key is absent and may already have been pruned.
        """
        message = wire.effect_request_to_pb(request)
        context = {"operation_id": request.operation_id, "case_id": request.case_id, "rpc": "Apply"}
        response = await call_async(self._stub.Apply, message, self._settings, deadline, log_context=context)
        return convert.applied_effect(response)

    async def lookup(self, operation_id: str, *, deadline: float | None = None) -> LookupAnswer:
        """Return whether the effect of operation_id exists, and how fresh that answer is."""
        request = effect_receiver_pb2.LookupRequest(operation_id=operation_id)
        context = {"operation_id": operation_id, "rpc": "Lookup"}
        response = await call_async(self._stub.Lookup, request, self._settings, deadline, log_context=context)
        return convert.lookup_answer(response.result)

    async def batch_lookup(self, operation_ids: Sequence[str], *, deadline: float | None = None) -> LookupBatch:
        """Look up many operation ids (at most 1,000) in one call; answers come in request order."""
        request = effect_receiver_pb2.BatchLookupRequest(operation_ids=list(operation_ids))
        response = await call_async(self._stub.BatchLookup, request, self._settings, deadline)
        return convert.lookup_batch(response)

    async def list_effects(self, case_id: str, *, page_size: int = 0) -> AsyncIterator[EffectRecord]:
        """Yield the effects written for case_id, oldest first, fetching pages as the iterator advances
        (each page retried on its own)."""
        page_token = ""
        while True:
            request = effect_receiver_pb2.ListEffectsRequest(
                case_id=case_id, page_size=page_size, page_token=page_token
            )
            response = await call_async(self._stub.ListEffects, request, self._settings)
            for effect in response.effects:
                yield convert.effect(effect)
            page_token = response.next_page_token
            if not page_token:
                return
