"""The measured calls, each checking its answer: a call that does not do what it should counts as failed."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from datetime import UTC, datetime

from bench import _workload
from bench._load import Call, Sample, drive
from decisionflow.channels import aio_insecure_channel
from decisionflow.v1 import common_pb2, effect_receiver_pb2, effect_receiver_pb2_grpc, review_pb2, review_pb2_grpc

CALL_TIMEOUT_SECONDS = 30.0


class UnexpectedAnswer(Exception):
    """A measured call succeeded at the transport but did not answer as the benchmark expected."""


# Connections per server: with --workers the kernel picks a worker per connection, so the load
# needs several to reach every worker; the same number is used at every worker count and for the
# baseline chain.
CONNECTIONS = 8


class Clients:
    """grpc.aio stubs to the orchestrator, the receiver and the baseline chain, CONNECTIONS connections
    each; every call takes the next connection."""

    def __init__(self, orchestrator: str, receiver: str, baseline: str) -> None:
        # A local subchannel pool per channel: otherwise channels to one target share one connection.
        options = [("grpc.use_local_subchannel_pool", 1)]
        self._channels = {
            t: [aio_insecure_channel(t, options=options) for _ in range(CONNECTIONS)]
            for t in {orchestrator, receiver, baseline}
        }
        self._review = itertools.cycle([review_pb2_grpc.ReviewServiceStub(c) for c in self._channels[orchestrator]])
        self._receiver = itertools.cycle(
            [effect_receiver_pb2_grpc.EffectReceiverServiceStub(c) for c in self._channels[receiver]]
        )
        self._baseline = itertools.cycle([review_pb2_grpc.ReviewServiceStub(c) for c in self._channels[baseline]])

    @property
    def review(self) -> review_pb2_grpc.ReviewServiceAsyncStub:
        """The orchestrator's ReviewService on the next connection."""
        return next(self._review)

    @property
    def receiver(self) -> effect_receiver_pb2_grpc.EffectReceiverServiceAsyncStub:
        """The receiver on the next connection."""
        return next(self._receiver)

    @property
    def baseline(self) -> review_pb2_grpc.ReviewServiceAsyncStub:
        """Hop A of the baseline chain on the next connection."""
        return next(self._baseline)

    async def close(self) -> None:
        """Close every channel."""
        await asyncio.gather(*(channel.close(None) for group in self._channels.values() for channel in group))


async def baseline(clients: Clients, calls: int, in_flight: int) -> Sample:
    """Approve through the bare chain calls times."""
    request = _workload.sample_approve_request()

    async def call() -> None:
        await clients.baseline.Approve(request, timeout=CALL_TIMEOUT_SECONDS)

    return await drive([call] * calls, in_flight)


async def _start_review(clients: Clients, tag: str, request: review_pb2.StartReviewRequest) -> str:
    """StartReview of a fresh case; return the new proposal's operation id (it must be created)."""
    response = await clients.review.StartReview(request, timeout=CALL_TIMEOUT_SECONDS)
    if not response.created:
        raise UnexpectedAnswer(f"StartReview {tag}: created=false")
    return response.proposal.operation_id


async def _approve(clients: Clients, request: review_pb2.ApproveRequest, *, replay: bool) -> None:
    """Approve; the answer must be COMMITTED, and a replay exactly when replay is True."""
    response = await clients.review.Approve(request, timeout=CALL_TIMEOUT_SECONDS)
    if response.outcome != common_pb2.OUTCOME_COMMITTED or response.replay != replay:
        raise UnexpectedAnswer(f"Approve {request.operation_id}: outcome {response.outcome}, replay {response.replay}")


def _approve_request(operation_id: str) -> review_pb2.ApproveRequest:
    return review_pb2.ApproveRequest(operation_id=operation_id, decision=common_pb2.DECISION_APPROVE)


async def start_reviews(clients: Clients, tags: Sequence[str], in_flight: int) -> tuple[Sample, list[str]]:
    """StartReview for a fresh case per tag; return the sample and the operation ids (in tag order)."""
    operation_ids = [""] * len(tags)

    def one(index: int) -> Call:
        request = _workload.start_review_request(tags[index])

        async def call() -> None:
            operation_ids[index] = await _start_review(clients, tags[index], request)

        return call

    sample = await drive([one(i) for i in range(len(tags))], in_flight)
    return sample, operation_ids


async def approvals(clients: Clients, operation_ids: Sequence[str], in_flight: int, *, replay: bool) -> Sample:
    """Approve each operation; every answer must be COMMITTED, and a replay exactly when replay is True."""

    def one(operation_id: str) -> Call:
        request = _approve_request(operation_id)

        async def call() -> None:
            await _approve(clients, request, replay=replay)

        return call

    return await drive([one(op) for op in operation_ids if op], in_flight)


async def reviews_in_turn(clients: Clients, tags: Sequence[str], in_flight: int) -> Sample:
    """StartReview for a fresh case per tag and then, in the same call of the driver, its first Approve:
    reviews opened and answered in turn, as they reach a service over a day, rather than every review
    opened before any is answered (the StartReview and first Approve measurements)."""

    def one(tag: str) -> Call:
        request = _workload.start_review_request(tag)

        async def call() -> None:
            operation_id = await _start_review(clients, tag, request)
            await _approve(clients, _approve_request(operation_id), replay=False)

        return call

    return await drive([one(tag) for tag in tags], in_flight)


def apply_requests(tags: Sequence[str]) -> list[effect_receiver_pb2.ApplyRequest]:
    """Apply requests as the orchestrator would send them for approvals of these tags' proposals."""
    now = datetime.now(UTC)
    return [_workload.apply_request(tag, now) for tag in tags]


async def applies(
    clients: Clients, requests: Sequence[effect_receiver_pb2.ApplyRequest], in_flight: int, *, replay: bool
) -> Sample:
    """Apply each request at the receiver; the result must be CREATED, or REPLAYED when replay is True."""
    expected = effect_receiver_pb2.APPLY_RESULT_REPLAYED if replay else effect_receiver_pb2.APPLY_RESULT_CREATED

    def one(request: effect_receiver_pb2.ApplyRequest) -> Call:
        async def call() -> None:
            response = await clients.receiver.Apply(request, timeout=CALL_TIMEOUT_SECONDS)
            if response.result != expected:
                raise UnexpectedAnswer(f"Apply {request.operation_id}: result {response.result}")

        return call

    return await drive([one(r) for r in requests], in_flight)
