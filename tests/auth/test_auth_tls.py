"""decisionflow.tls on a real TLS server on 127.0.0.1: mutual TLS names the principal by its
certificate; certificates come from a throwaway CA (tests/security/pki.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest

from decisionflow import reasons
from decisionflow.tls import channel_credentials, server_credentials
from decisionflow.v1 import review_pb2, review_pb2_grpc
from decisionflow_server.runtime.auth import Principal, Role
from tests.security.pki import Pki, write_ca, write_leaf
from tests.support.auth import ContractRecorder, bearer, known_credentials, refusal, serve


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = write_ca(directory, "ca")
    other = write_ca(directory, "other-ca")
    write_leaf(directory, ca, "server", "localhost", "127.0.0.1")
    write_leaf(directory, ca, "console", common_name="review-console")
    write_leaf(directory, ca, "unlisted", common_name="intruder")
    write_leaf(directory, ca, "san-only", "review-console", common_name="not-listed-cn")
    write_leaf(directory, other, "stranger", common_name="review-console")
    return Pki(directory)


@asynccontextmanager
async def tls_review_stub(port: int, credentials: grpc.ChannelCredentials) -> AsyncIterator[Any]:
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        yield review_pb2_grpc.ReviewServiceStub(channel)


def test_mutual_tls_principal_comes_from_the_verified_certificate(pki: Pki) -> None:
    async def scenario() -> None:
        recorder = ContractRecorder()
        tls = server_credentials(pki.pem("server"), pki.key("server"), pki.pem("ca"))
        async with serve(recorder.register, credentials=known_credentials(), server_credentials=tls) as running:
            for client in ("console", "san-only"):
                client_tls = channel_credentials(pki.pem("ca"), pki.pem(client), pki.key(client))
                async with tls_review_stub(running.port, client_tls) as stub:
                    await stub.Approve(review_pb2.ApproveRequest(), timeout=10)
            unlisted = channel_credentials(pki.pem("ca"), pki.pem("unlisted"), pki.key("unlisted"))
            async with tls_review_stub(running.port, unlisted) as stub:
                code, reason, _ = await refusal(stub.Approve(review_pb2.ApproveRequest(), timeout=10))
            assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, reasons.UNAUTHENTICATED)
            # A token sent alongside a certificate names the principal, and is checked like any token.
            console = channel_credentials(pki.pem("ca"), pki.pem("console"), pki.key("console"))
            async with tls_review_stub(running.port, console) as stub:
                await stub.GetProposal(review_pb2.GetProposalRequest(), metadata=bearer("arthur"), timeout=10)
                code, _, _ = await refusal(
                    stub.Approve(review_pb2.ApproveRequest(), metadata=bearer("arthur"), timeout=10)
                )
                assert code == grpc.StatusCode.PERMISSION_DENIED
        certificate_principal = Principal("review-console", frozenset({Role.REVIEWER}), "certificate")
        assert recorder.principals == [
            certificate_principal,
            certificate_principal,
            Principal("arthur", frozenset({Role.AUTHOR}), "token"),
        ]

    asyncio.run(scenario())


def test_a_client_without_a_certificate_from_the_client_ca_cannot_connect(pki: Pki) -> None:
    async def scenario() -> None:
        recorder = ContractRecorder()
        tls = server_credentials(pki.pem("server"), pki.key("server"), pki.pem("ca"))
        async with serve(recorder.register, credentials=known_credentials(), server_credentials=tls) as running:
            for client_tls in (
                channel_credentials(pki.pem("ca")),
                channel_credentials(pki.pem("ca"), pki.pem("stranger"), pki.key("stranger")),
            ):
                async with tls_review_stub(running.port, client_tls) as stub:
                    code, _, _ = await refusal(
                        stub.Approve(review_pb2.ApproveRequest(), metadata=bearer("rita"), timeout=10)
                    )
                assert code == grpc.StatusCode.UNAVAILABLE
        assert recorder.calls == []

    asyncio.run(scenario())


def test_server_only_tls_with_a_bearer_token(pki: Pki) -> None:
    async def scenario() -> None:
        recorder = ContractRecorder()
        tls = server_credentials(pki.pem("server"), pki.key("server"))
        async with serve(recorder.register, credentials=known_credentials(), server_credentials=tls) as running:
            async with tls_review_stub(running.port, channel_credentials(pki.pem("ca"))) as stub:
                await stub.Approve(review_pb2.ApproveRequest(), metadata=bearer("rita"), timeout=10)
                code, _, _ = await refusal(stub.Approve(review_pb2.ApproveRequest(), timeout=10))
                assert code == grpc.StatusCode.UNAUTHENTICATED
            # The client refuses a server whose certificate its CA did not sign.
            async with tls_review_stub(running.port, channel_credentials(pki.pem("other-ca"))) as stub:
                code, _, _ = await refusal(
                    stub.Approve(review_pb2.ApproveRequest(), metadata=bearer("rita"), timeout=10)
                )
                assert code == grpc.StatusCode.UNAVAILABLE
        assert [p.name for p in recorder.principals] == ["rita"]

    asyncio.run(scenario())


def test_credentials_helpers_refuse_half_a_client_identity_and_name_missing_files(pki: Pki) -> None:
    with pytest.raises(ValueError, match="both cert_file and key_file"):
        channel_credentials(pki.pem("ca"), pki.pem("console"))
    with pytest.raises(ValueError, match="both cert_file and key_file"):
        channel_credentials(pki.pem("ca"), key_file=pki.key("console"))
    with pytest.raises(OSError, match="cannot read client CA"):
        server_credentials(pki.pem("server"), pki.key("server"), pki.directory / "absent.pem")
