"""Mutual TLS names the principal by its verified client certificate, and no server listens beyond
loopback unless it has both TLS and authentication."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from decisionflow.tls import channel_credentials
from decisionflow.v1 import common_pb2, review_pb2, review_pb2_grpc
from decisionflow_server.foundation.exposure import ExposureRefused
from decisionflow_server.runtime.auth import OidcConfig, Role, issue_token
from decisionflow_server.runtime.server_security import ServerSecurity
from effect_receiver.config import ReceiverConfig
from effect_receiver.main import create_server as create_receiver
from orchestrator.config import OrchestratorConfig
from orchestrator.main import create_server as create_orchestrator
from tests.security.dbstate import snapshot
from tests.security.pki import Pki, make_pki
from tests.support.servers import LoopThread
from tests.support.stack import CHECKPOINT_KEY, Stack, approve, start_request

CLIENTS = ("author-console", "review-console", "intruder")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Certificates for the server and the client consoles."""
    return make_pki(tmp_path_factory.mktemp("pki"), CLIENTS)


def _credentials(directory: Path) -> tuple[Path, str]:
    """A credentials file with the two consoles as certificate principals and the orchestrator's token."""
    path = directory / "credentials.json"
    token = issue_token(path, "orchestrator", [Role.EFFECT_WRITER])
    document = json.loads(path.read_text())
    document["certificates"] = [
        {"principal": "author-console", "roles": ["author"]},
        {"principal": "review-console", "roles": ["reviewer"]},
    ]
    path.write_text(json.dumps(document))
    return path, token


@pytest.fixture
def mtls_stack(tmp_path: Path, pki: Pki) -> Iterator[tuple[Stack, Pki]]:
    """A receiver on loopback (bearer token) and an orchestrator that requires client certificates."""
    credentials, token = _credentials(tmp_path)
    stack = Stack(f"sqlite:///{tmp_path / 'receiver.db'}", f"sqlite:///{tmp_path / 'orchestrator.db'}", LoopThread())
    try:
        receiver = stack.loop.run(
            create_receiver(
                ReceiverConfig(
                    address="127.0.0.1:0",
                    database_url=stack.receiver_url,
                    security=ServerSecurity(credentials_file=credentials),
                )
            )
        )
        stack.receiver_server, stack.receiver_port = receiver, receiver.port
        security = ServerSecurity(
            credentials_file=credentials,
            tls_cert=pki.cert("server"),
            tls_key=pki.key("server"),
            tls_client_ca=pki.cert("ca"),
        )
        stack.start_orchestrator(security=security, receiver_token=token)
        yield stack, pki
    finally:
        stack.close()


def _review(stack: Stack, pki: Pki, client: str | None) -> tuple[grpc.Channel, review_pb2_grpc.ReviewServiceStub]:
    if client is None:
        credentials = channel_credentials(pki.cert("ca"))
    elif client == "stranger":
        credentials = channel_credentials(pki.cert("ca"), pki.cert("stranger"), pki.key("stranger"))
    else:
        credentials = channel_credentials(pki.cert("ca"), pki.cert(client), pki.key(client))
    channel = grpc.secure_channel(f"127.0.0.1:{stack.orchestrator_port}", credentials)
    stack.channels.append(channel)
    return channel, review_pb2_grpc.ReviewServiceStub(channel)


def test_mutual_tls_principal_is_the_client_certificate(mtls_stack: tuple[Stack, Pki]) -> None:
    stack, pki = mtls_stack
    _, author = _review(stack, pki, "author-console")
    started = author.StartReview(start_request(), timeout=15)
    operation_id = started.proposal.operation_id
    assert started.proposal.created_by == "author-console"

    before = (snapshot(stack.orchestrator_url), snapshot(stack.receiver_url))
    with pytest.raises(grpc.RpcError) as wrong_role:
        author.Approve(approve(operation_id), timeout=15)
    assert wrong_role.value.code() == grpc.StatusCode.PERMISSION_DENIED
    _, intruder = _review(stack, pki, "intruder")  # signed by the CA, but not a known principal
    with pytest.raises(grpc.RpcError) as unknown:
        intruder.Approve(approve(operation_id), timeout=15)
    assert unknown.value.code() == grpc.StatusCode.UNAUTHENTICATED
    for client in (None, "stranger"):  # no certificate, or one from another CA: no TLS session at all
        _, refused = _review(stack, pki, client)
        with pytest.raises(grpc.RpcError) as no_session:
            refused.Approve(approve(operation_id), timeout=15)
        assert no_session.value.code() == grpc.StatusCode.UNAVAILABLE
    assert (snapshot(stack.orchestrator_url), snapshot(stack.receiver_url)) == before

    _, reviewer = _review(stack, pki, "review-console")
    answer = reviewer.Approve(approve(operation_id), timeout=15)
    assert answer.outcome == common_pb2.OUTCOME_COMMITTED
    found = reviewer.GetOperation(review_pb2.GetOperationRequest(operation_id=operation_id), timeout=10)
    assert found.operation.reviewer == "review-console"


EXPOSED = ("0.0.0.0:0", "[::]:0")


def _orchestrator_config(address: str, security: ServerSecurity, directory: Path) -> OrchestratorConfig:
    return OrchestratorConfig(
        checkpoint_keys=(CHECKPOINT_KEY.encode(),),
        address=address,
        database_url=f"sqlite:///{directory / 'orchestrator.db'}",
        receiver_target="127.0.0.1:1",
        security=security,
    )


def _receiver_config(address: str, security: ServerSecurity, directory: Path) -> ReceiverConfig:
    return ReceiverConfig(address=address, database_url=f"sqlite:///{directory / 'receiver.db'}", security=security)


@pytest.mark.parametrize("address", EXPOSED)
def test_servers_refuse_to_listen_beyond_loopback_without_tls_and_auth(tmp_path: Path, pki: Pki, address: str) -> None:
    credentials, _ = _credentials(tmp_path)
    insufficient = {
        "nothing": ServerSecurity(),
        "tls only": ServerSecurity(tls_cert=pki.cert("server"), tls_key=pki.key("server")),
        "auth only": ServerSecurity(credentials_file=credentials),
        "oidc only": ServerSecurity(oidc=OidcConfig("https://login.example.com", "decisionflow")),
    }

    async def scenario() -> None:
        for what, security in insufficient.items():
            with pytest.raises(ExposureRefused):
                await create_orchestrator(_orchestrator_config(address, security, tmp_path))
            with pytest.raises(ExposureRefused):
                await create_receiver(_receiver_config(address, security, tmp_path))
            assert not (tmp_path / "orchestrator.db").exists(), what  # refused before touching the database
            assert not (tmp_path / "receiver.db").exists(), what

    asyncio.run(scenario())


def test_servers_listen_beyond_loopback_with_tls_and_auth(tmp_path: Path, pki: Pki) -> None:
    credentials, _ = _credentials(tmp_path)
    security = ServerSecurity(credentials_file=credentials, tls_cert=pki.cert("server"), tls_key=pki.key("server"))

    async def scenario() -> None:
        servers = [
            await create_orchestrator(_orchestrator_config("0.0.0.0:0", security, tmp_path)),
            await create_receiver(_receiver_config("0.0.0.0:0", security, tmp_path)),
        ]
        try:
            for server in servers:
                assert server.port > 0
                async with grpc.aio.secure_channel(
                    f"127.0.0.1:{server.port}", channel_credentials(pki.cert("ca"))
                ) as channel:
                    health = health_pb2_grpc.HealthStub(channel)
                    answer = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
                    assert answer.status == health_pb2.HealthCheckResponse.SERVING
                async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as plaintext:
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await health_pb2_grpc.HealthStub(plaintext).Check(health_pb2.HealthCheckRequest(), timeout=5)
                    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            # Authentication is on too: a TLS call without a token is refused.
            async with grpc.aio.secure_channel(
                f"127.0.0.1:{servers[0].port}", channel_credentials(pki.cert("ca"))
            ) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as anonymous:
                    await review_pb2_grpc.ReviewServiceStub(channel).StartReview(start_request(), timeout=10)
                assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
        finally:
            for server in servers:
                await server.stop(1.0)

    asyncio.run(scenario())
