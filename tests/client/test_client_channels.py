"""decisionflow.channels: gRPC retries off, 1 MiB limits, interceptors applied."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from decisionflow import channels
from decisionflow.channels import MAX_MESSAGE_BYTES
from decisionflow.client import ReviewClient, Unavailable
from decisionflow.retry import RetryPolicy
from decisionflow.v1 import effect_receiver_pb2_grpc, review_pb2, review_pb2_grpc
from tests.security.pki import Pki, make_pki
from tests.support.receiver import StartReceiver, apply_request, count_rows, new_operation_id

from .client_standin import Fail, Sleeps, StandIn, standin

# A service config asking gRPC itself to retry UNAVAILABLE up to 4 times per call.
GRPC_RETRY_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": "decisionflow.v1.ReviewService"}],
                "retryPolicy": {
                    "maxAttempts": 4,
                    "initialBackoff": "0.01s",
                    "maxBackoff": "0.01s",
                    "backoffMultiplier": 1,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)
THREE = RetryPolicy("test_three", 3, 30.0, initial_backoff=0.01, max_backoff=0.01, multiplier=1.0)


@pytest.fixture
def server() -> Iterator[StandIn]:
    with standin() as running:
        yield running


def _approve_once(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError):
        review_pb2_grpc.ReviewServiceStub(channel).Approve(review_pb2.ApproveRequest(), timeout=5)


def test_grpc_retries_are_off_even_when_a_service_config_asks_for_them(server: StandIn) -> None:
    server.script.then("Approve", *[Fail(grpc.StatusCode.UNAVAILABLE)] * 20)

    ours = channels.insecure_channel(server.target, options=[("grpc.service_config", GRPC_RETRY_CONFIG)])
    with ours:
        _approve_once(ours)
    assert len(server.script.calls("Approve")) == 1

    # Control: a plain channel with the same config lets gRPC retry, so the count above means something.
    plain = grpc.insecure_channel(server.target, options=[("grpc.service_config", GRPC_RETRY_CONFIG)])
    with plain:
        _approve_once(plain)
    assert len(server.script.calls("Approve")) == 1 + 4


def test_the_server_sees_one_call_per_client_attempt(server: StandIn) -> None:
    server.script.then("Approve", *[Fail(grpc.StatusCode.UNAVAILABLE)] * 20)
    sleeps = Sleeps()

    options = [("grpc.service_config", GRPC_RETRY_CONFIG)]
    with channels.insecure_channel(server.target, options=options) as ch, pytest.raises(Unavailable) as raised:
        ReviewClient(ch, policy=THREE, sleep=sleeps).approve("op-v1-" + "a" * 64)

    assert raised.value.attempts == THREE.max_attempts
    assert len(server.script.calls("Approve")) == THREE.max_attempts
    assert len(sleeps.waits) == THREE.max_attempts - 1


def test_messages_over_one_mebibyte_are_refused_before_sending(server: StandIn) -> None:
    with channels.insecure_channel(server.target) as ch:
        stub = review_pb2_grpc.ReviewServiceStub(ch)
        with pytest.raises(grpc.RpcError) as raised:
            stub.StartReview(review_pb2.StartReviewRequest(body="x" * MAX_MESSAGE_BYTES), timeout=5)
        assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert server.script.calls("StartReview") == []

        stub.StartReview(review_pb2.StartReviewRequest(body="x" * (MAX_MESSAGE_BYTES - 64)), timeout=5)
        assert len(server.script.calls("StartReview")) == 1


def test_replies_over_one_mebibyte_are_refused(server: StandIn) -> None:
    server.script.answer(
        "GetOperation",
        review_pb2.GetOperationResponse(operation=review_pb2.Operation(rejection_reason="y" * MAX_MESSAGE_BYTES)),
    )
    with channels.insecure_channel(server.target) as ch, pytest.raises(grpc.RpcError) as raised:
        review_pb2_grpc.ReviewServiceStub(ch).GetOperation(review_pb2.GetOperationRequest(), timeout=5)
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_fixed_options_cannot_be_overridden() -> None:
    with pytest.raises(ValueError, match=r"grpc\.enable_retries"):
        channels.insecure_channel("127.0.0.1:1", options=[("grpc.enable_retries", 1)])
    with pytest.raises(ValueError, match="max_receive_message_length"):
        channels.channel_options([("grpc.max_receive_message_length", 10 * MAX_MESSAGE_BYTES)])
    assert ("grpc.enable_retries", 0) in channels.channel_options()


class AddHeader(grpc.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    """Adds one metadata entry to every call, as an authentication interceptor would."""

    def __init__(self, key: str, value: str) -> None:
        self.entry = (key, value)

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        metadata = [*(details.metadata or ()), self.entry]
        return continuation(details._replace(metadata=metadata), request)


class AioAddHeader(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    """The asyncio form of AddHeader."""

    def __init__(self, key: str, value: str) -> None:
        self.entry = (key, value)

    async def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        metadata = grpc.aio.Metadata(*(details.metadata or ()), self.entry)
        details = details._replace(metadata=metadata)
        return await continuation(details, request)


def test_interceptors_run_on_every_call(server: StandIn) -> None:
    with channels.insecure_channel(server.target, interceptors=[AddHeader("authorization", "Bearer t0k")]) as ch:
        ReviewClient(ch).get_operation("op-v1-" + "b" * 64)
    assert server.script.calls("GetOperation")[0].metadata["authorization"] == "Bearer t0k"


def test_aio_channels_take_interceptors_and_fixed_options(server: StandIn) -> None:
    server.script.then("Approve", *[Fail(grpc.StatusCode.UNAVAILABLE)] * 5)

    async def run() -> None:
        channel = channels.aio_insecure_channel(
            server.target,
            interceptors=[AioAddHeader("authorization", "Bearer aio")],
            options=[("grpc.service_config", GRPC_RETRY_CONFIG)],
        )
        async with channel:
            stub = review_pb2_grpc.ReviewServiceStub(channel)
            await stub.GetOperation(review_pb2.GetOperationRequest(), timeout=5)
            with pytest.raises(grpc.RpcError):
                await stub.Approve(review_pb2.ApproveRequest(), timeout=5)

    asyncio.run(run())
    assert server.script.calls("GetOperation")[0].metadata["authorization"] == "Bearer aio"
    assert len(server.script.calls("Approve")) == 1


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A throwaway CA and a server certificate for 127.0.0.1."""
    return make_pki(tmp_path_factory.mktemp("pki"), clients=())


def test_secure_channels_are_built_with_the_same_options(pki: Pki) -> None:
    server_credentials = grpc.ssl_server_credentials(
        [(pki.key("server").read_bytes(), pki.cert("server").read_bytes())]
    )
    credentials = grpc.ssl_channel_credentials(pki.cert("ca").read_bytes())
    too_big = review_pb2.StartReviewRequest(body="x" * MAX_MESSAGE_BYTES)
    options = [("grpc.service_config", GRPC_RETRY_CONFIG)]

    with standin(server_credentials) as server:
        server.script.then("Approve", *[Fail(grpc.StatusCode.UNAVAILABLE)] * 20)
        with channels.secure_channel(server.target, credentials, options=options) as ch:
            _approve_once(ch)
            with pytest.raises(grpc.RpcError) as raised:
                review_pb2_grpc.ReviewServiceStub(ch).StartReview(too_big, timeout=5)
            assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        # gRPC did not retry under the service config, and the oversized request never left.
        assert len(server.script.calls("Approve")) == 1
        assert server.script.calls("StartReview") == []

        async def run() -> grpc.StatusCode:
            async with channels.aio_secure_channel(server.target, credentials, options=options) as ch:
                stub = review_pb2_grpc.ReviewServiceStub(ch)
                with pytest.raises(grpc.RpcError):
                    await stub.Approve(review_pb2.ApproveRequest(), timeout=5)
                try:
                    await stub.StartReview(too_big, timeout=5)
                except grpc.aio.AioRpcError as error:
                    return error.code()
            raise AssertionError("the oversized request was sent")

        assert asyncio.run(run()) is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert len(server.script.calls("Approve")) == 2
        assert server.script.calls("StartReview") == []


def _applied_per_receiver(channel: grpc.Channel, receivers: list[Path], calls: int) -> list[int]:
    """Make calls Applies of new operations over channel; return how many more effects each database holds."""
    before = [count_rows(f"sqlite:///{path}")[0] for path in receivers]
    stub = effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel)
    for _ in range(calls):
        stub.Apply(apply_request(new_operation_id()), timeout=10)
    return [count_rows(f"sqlite:///{path}")[0] - was for path, was in zip(receivers, before, strict=True)]


def test_a_target_with_several_addresses_gets_calls_at_each_in_turn(
    start_receiver: StartReceiver, tmp_path: Path
) -> None:
    # Two receivers with a database each, so that where a call went is a row in one of them; one
    # target naming both, as a Kubernetes headless Service's name resolves to every pod.
    databases = [tmp_path / "first.db", tmp_path / "second.db"]
    ports = [start_receiver(database_url=f"sqlite:///{path}").port for path in databases]
    target = "ipv4:" + ",".join(f"127.0.0.1:{port}" for port in ports)
    with channels.open_channel(target) as channel:
        # Until both connections are up the calls go to whichever is; then strictly in turn.
        for _ in range(50):
            if min(_applied_per_receiver(channel, databases, 2)) == 0:
                continue
            break
        assert _applied_per_receiver(channel, databases, 20) == [10, 10]
    # The default it replaces: pick_first sends every call of the channel to one address.
    with channels.open_channel(target, options=[("grpc.lb_policy_name", "pick_first")]) as channel:
        assert sorted(_applied_per_receiver(channel, databases, 20)) == [0, 20]
