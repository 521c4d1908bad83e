"""decisionflow.tls on a real TLS server on 127.0.0.1: mutual TLS names the principal by its
certificate; certificates come from a throwaway CA made with the openssl command line."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from decisionflow import reasons
from decisionflow.auth import Principal, Role
from decisionflow.auth.testing import ContractRecorder, bearer, known_credentials, refusal, serve
from decisionflow.tls import channel_credentials, server_credentials
from decisionflow.v1 import review_pb2, review_pb2_grpc

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command line")


@dataclass(frozen=True)
class Pki:
    """Paths of a CA and the certificates and keys it signed, plus a stranger signed by another CA."""

    directory: Path

    def pem(self, name: str) -> Path:
        return self.directory / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=30)


def _ca(directory: Path, name: str) -> None:
    _openssl(
        directory,
        *("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}"),
        *("-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )


def _leaf(directory: Path, ca: str, name: str, common_name: str, extensions: str, serial: int) -> None:
    (directory / f"{name}.ext").write_text(extensions + "\nbasicConstraints=CA:FALSE\n")
    _openssl(
        directory,
        *("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={common_name}"),
    )
    _openssl(
        directory,
        *("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key"),
        *("-set_serial", str(serial), "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext"),
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    _ca(directory, "ca")
    _ca(directory, "other-ca")
    _leaf(directory, "ca", "server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1", 1)
    _leaf(directory, "ca", "console", "review-console", "extendedKeyUsage=clientAuth", 2)
    _leaf(directory, "ca", "unlisted", "intruder", "extendedKeyUsage=clientAuth", 3)
    _leaf(directory, "ca", "san-only", "not-listed-cn", "subjectAltName=DNS:review-console", 4)
    _leaf(directory, "other-ca", "stranger", "review-console", "extendedKeyUsage=clientAuth", 5)
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
