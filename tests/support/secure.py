"""Real orchestrator and receiver servers with authentication on: a credentials file made with
issue_token, one principal per role (and one holding two), and raw channels to call them; and the
TLS material and token files for servers dialled at IP addresses (``NetworkSecurity``)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from decisionflow_server.foundation.processes import ServiceProcess
from decisionflow_server.runtime.auth import Role, bearer_metadata, issue_token
from decisionflow_server.runtime.server_security import ServerSecurity
from tests.security.contract import server_streaming
from tests.support.audit_log import InMemoryAuditLog
from tests.support.auth import ROLES
from tests.support.servers import LoopThread
from tests.support.stack import Stack

# The auth tests' principals: one per role, and sam holding two.
PRINCIPALS: Mapping[str, frozenset[Role]] = ROLES
SINGLE_ROLE_PRINCIPALS = ("rita", "arthur", "olga", "walter", "edna", "audrey")


@dataclass
class SecureStack:
    """A receiver and an orchestrator that both require credentials, and the token of each principal."""

    stack: Stack
    credentials_file: Path
    tokens: dict[str, str]
    _channels: list[grpc.Channel] = field(default_factory=list)

    def channel(self, receiver: bool) -> grpc.Channel:
        """A plaintext loopback channel to the receiver or the orchestrator."""
        port = self.stack.receiver_port if receiver else self.stack.orchestrator_port
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.enable_retries", 0)])
        self._channels.append(channel)
        return channel

    def as_(self, principal: str) -> tuple[tuple[str, str], ...]:
        """Call metadata carrying principal's bearer token."""
        return bearer_metadata(self.tokens[principal])

    def close(self) -> None:
        """Close the channels and stop both servers."""
        for channel in self._channels:
            channel.close()
        self.stack.close()


def start_secure_stack(
    directory: Path,
    orchestrator_url: str | None = None,
    audit_log: InMemoryAuditLog | None = None,
    **orchestrator: Any,
) -> SecureStack:
    """Issue the principals' tokens into the credentials file and start both servers with it (the
    orchestrator serving audit_log, a fake at the AuditService's seam, when one is given)."""
    credentials = directory / "credentials.json"
    tokens = {name: issue_token(credentials, name, roles) for name, roles in PRINCIPALS.items()}
    security = ServerSecurity(credentials_file=credentials)
    stack = Stack(
        f"sqlite:///{directory / 'receiver.db'}",
        orchestrator_url or f"sqlite:///{directory / 'orchestrator.db'}",
        LoopThread(),
        audit_log=audit_log,
    )
    secure = SecureStack(stack, credentials, tokens)
    try:
        stack.start_receiver(security=security)
        stack.start_orchestrator(security=security, receiver_token=tokens["walter"], **orchestrator)
    except BaseException:
        secure.close()
        raise
    return secure


def raw_invoke(
    channel: grpc.Channel, path: str, request: bytes, metadata: Sequence[tuple[str, str]] = (), timeout: float = 15
) -> bytes:
    """Send request bytes to path the way the method's shape wants; return the response bytes or raise
    the refusal (grpc.RpcError). A server-streaming method's call is cancelled after its first message,
    which is what this returns: an admitted WatchEvents answers a heartbeat at once and never ends."""
    # No serializers: the bytes go on the wire exactly as given, parsed or not.
    if not server_streaming(path):
        response = channel.unary_unary(path, request_serializer=None, response_deserializer=None)(
            request, metadata=tuple(metadata), timeout=timeout
        )
        assert isinstance(response, bytes)
        return response
    responses: Any = channel.unary_stream(path, request_serializer=None, response_deserializer=None)(
        request, metadata=tuple(metadata), timeout=timeout
    )
    try:
        first = next(responses)  # a refusal raises the call itself, an RpcError with its status
    except StopIteration:
        raise AssertionError(f"{path} ended with OK before its first message") from None
    finally:
        responses.cancel()  # no-op once the call has ended
    assert isinstance(first, bytes)
    return first


def raw_call(
    channel: grpc.Channel, path: str, request: bytes, metadata: Sequence[tuple[str, str]] = ()
) -> tuple[grpc.StatusCode, bytes]:
    """raw_invoke's outcome as the status code and the (first) response's bytes (empty on failure)."""
    try:
        response = raw_invoke(channel, path, request, metadata)
    except grpc.RpcError as error:
        return error.code(), b""
    return grpc.StatusCode.OK, response


async def raw_call_aio(
    channel: grpc.aio.Channel, path: str, request: bytes, metadata: Sequence[tuple[str, str]] = (), timeout: float = 5
) -> tuple[grpc.StatusCode, bytes]:
    """raw_call on an asyncio channel."""
    try:
        if not server_streaming(path):
            response = await channel.unary_unary(path, None, None)(request, metadata=tuple(metadata), timeout=timeout)
            assert isinstance(response, bytes)
            return grpc.StatusCode.OK, response
        call = channel.unary_stream(path, None, None)(request, metadata=tuple(metadata), timeout=timeout)
        try:
            first = await call.read()
        finally:
            call.cancel()
    except grpc.aio.AioRpcError as error:
        return error.code(), b""
    assert isinstance(first, bytes), f"{path} ended with OK before its first message"  # else grpc.aio.EOF
    return grpc.StatusCode.OK, first


@dataclass(frozen=True)
class NetworkSecurity:
    """A CA, one certificate per server naming the IP addresses it is dialled at, a credentials file,
    and one token file per principal, all in one directory."""

    directory: Path

    @property
    def ca_file(self) -> Path:
        """The CA certificate every client trusts."""
        return self.directory / "ca.pem"

    @property
    def credentials_file(self) -> Path:
        """The credentials file every server checks tokens against."""
        return self.directory / "credentials.json"

    def cert(self, server: str) -> Path:
        """The server's certificate chain (PEM)."""
        return self.directory / f"{server}.pem"

    def key(self, server: str) -> Path:
        """The server's private key (PEM)."""
        return self.directory / f"{server}.key"

    def token_file(self, principal: str) -> Path:
        """The file holding principal's bearer token."""
        return self.directory / f"{principal}.token"

    def token(self, principal: str) -> str:
        """principal's bearer token."""
        return self.token_file(principal).read_text(encoding="utf-8").strip()

    def server_argv(self, server: str) -> list[str]:
        """The flags that make a server require TLS and a token."""
        return [
            "--tls-cert",
            str(self.cert(server)),
            "--tls-key",
            str(self.key(server)),
            "--credentials-file",
            str(self.credentials_file),
        ]


def write_network_security(
    directory: Path, servers: Mapping[str, Sequence[str]], principals: Mapping[str, frozenset[Role]]
) -> NetworkSecurity:
    """Issue a CA, a certificate per server whose subject alternative names are the addresses given
    (IP addresses become IP SANs), and a token per principal with its roles."""
    directory.mkdir(parents=True, exist_ok=True)
    security = NetworkSecurity(directory)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(security.ca_file))
    for server, addresses in servers.items():
        leaf = ca.issue_cert(*addresses, common_name=server)
        leaf.cert_chain_pems[0].write_to_path(str(security.cert(server)))
        leaf.private_key_pem.write_to_path(str(security.key(server)))
    for principal, roles in principals.items():
        security.token_file(principal).write_text(issue_token(security.credentials_file, principal, roles) + "\n")
        security.token_file(principal).chmod(0o600)
    return security


def hang_up(service: ServiceProcess, expected: str, seen: int) -> None:
    """Send SIGHUP (reload the credentials file) and wait until the log holds one more line containing expected."""
    service.process.send_signal(signal.SIGHUP)
    give_up = time.monotonic() + 30
    while service.log().count(expected) <= seen:
        assert service.process.poll() is None, service.log()
        assert time.monotonic() < give_up, f"no {expected!r} in the log after SIGHUP"
        time.sleep(0.05)


@pytest.fixture
def secure_stack(tmp_path: Path) -> Iterator[SecureStack]:
    """A secure stack with default orchestrator settings, for one test."""
    secure = start_secure_stack(tmp_path)
    try:
        yield secure
    finally:
        secure.close()
