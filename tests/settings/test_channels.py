"""open_channel and open_aio_channel against a real server: the bearer token arrives on every
call, TLS is used exactly when a CA file is given, and the fixed options cannot be overridden."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import grpc
import pytest

from decisionflow.channels import open_aio_channel, open_channel
from decisionflow.tls import server_credentials
from decisionflow.v1 import review_pb2, review_pb2_grpc
from tests.security.pki import Pki, make_pki
from tests.support.auth import TOKENS, ContractRecorder, known_credentials, serve

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command line")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), clients=())


def _approve_synchronously(target: str, ca_file: Path | None, token: str | None) -> grpc.StatusCode:
    with open_channel(target, ca_file=ca_file, token=token) as channel:
        try:
            review_pb2_grpc.ReviewServiceStub(channel).Approve(review_pb2.ApproveRequest(), timeout=10)
        except grpc.RpcError as error:
            return error.code()
    return grpc.StatusCode.OK


async def _approve(target: str, ca_file: Path | None, token: str | None) -> grpc.StatusCode:
    async with open_aio_channel(target, ca_file=ca_file, token=token) as channel:
        try:
            await review_pb2_grpc.ReviewServiceStub(channel).Approve(review_pb2.ApproveRequest(), timeout=10)
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK


def test_the_token_arrives_over_tls_when_a_ca_file_is_given(pki: Pki) -> None:
    recorder = ContractRecorder()

    async def scenario() -> None:
        tls = server_credentials(pki.cert("server"), pki.key("server"))
        async with serve(recorder.register, credentials=known_credentials(), server_credentials=tls) as running:
            target = f"127.0.0.1:{running.port}"
            ca = pki.cert("ca")
            assert await _approve(target, ca, TOKENS["rita"]) == grpc.StatusCode.OK
            assert await asyncio.to_thread(_approve_synchronously, target, ca, TOKENS["sam"]) == grpc.StatusCode.OK
            # Without a token the TLS channel still connects, and the server refuses the caller.
            assert await _approve(target, ca, None) == grpc.StatusCode.UNAUTHENTICATED
            assert await asyncio.to_thread(_approve_synchronously, target, ca, None) == grpc.StatusCode.UNAUTHENTICATED
            # Without a CA file the channel is plaintext, which a TLS server does not answer.
            assert await _approve(target, None, TOKENS["rita"]) == grpc.StatusCode.UNAVAILABLE
            plaintext = await asyncio.to_thread(_approve_synchronously, target, None, TOKENS["rita"])
            assert plaintext == grpc.StatusCode.UNAVAILABLE
            # A CA that did not sign the server's certificate is refused by the client.
            assert await _approve(target, pki.cert("other-ca"), TOKENS["rita"]) == grpc.StatusCode.UNAVAILABLE

    asyncio.run(scenario())
    assert [p.name for p in recorder.principals] == ["rita", "sam"]


def test_the_token_arrives_over_plaintext_loopback() -> None:
    recorder = ContractRecorder()

    async def scenario() -> None:
        async with serve(recorder.register, credentials=known_credentials()) as running:
            target = f"127.0.0.1:{running.port}"
            assert await _approve(target, None, TOKENS["rita"]) == grpc.StatusCode.OK
            assert await asyncio.to_thread(_approve_synchronously, target, None, TOKENS["sam"]) == grpc.StatusCode.OK
            assert await _approve(target, None, TOKENS["arthur"]) == grpc.StatusCode.PERMISSION_DENIED

    asyncio.run(scenario())
    assert [p.name for p in recorder.principals] == ["rita", "sam"]


@pytest.mark.parametrize("token", ["", "two words", "line\nbreak"])
def test_an_unusable_token_is_refused_before_any_channel_opens(token: str) -> None:
    with pytest.raises(ValueError, match="bearer token"):
        open_channel("127.0.0.1:1", token=token)
    with pytest.raises(ValueError, match="bearer token"):
        open_aio_channel("127.0.0.1:1", token=token)


def test_fixed_options_cannot_be_overridden() -> None:
    with pytest.raises(ValueError, match=r"grpc\.enable_retries"):
        open_channel("127.0.0.1:1", token=TOKENS["rita"], options=[("grpc.enable_retries", 1)])
    with pytest.raises(ValueError, match=r"grpc\.max_receive_message_length"):
        open_aio_channel("127.0.0.1:1", options=[("grpc.max_receive_message_length", 1 << 30)])
