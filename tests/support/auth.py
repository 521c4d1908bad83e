"""Test support for code behind AuthInterceptor: one known token per role, the matching
credentials, and a real server that records who called each RPC of the contract. It lives with
the tests, not in the shipped package, so ``decisionflow_server.runtime.auth`` does not import the server host.

    credentials = known_credentials()
    recorder = ContractRecorder()
    async with serve(recorder.register, credentials=credentials) as running:
        ...  # call with metadata=bearer("rita"); recorder.calls lists (method, principal)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import grpc

from decisionflow.status_details import error_info
from decisionflow_server.foundation.handlers import Context
from decisionflow_server.runtime.auth._credentials import Credentials, parse_credentials, token_sha256
from decisionflow_server.runtime.auth._errors import AUTH_STATUS
from decisionflow_server.runtime.auth._policy import RPC_ROLES, all_rpc_methods
from decisionflow_server.runtime.auth._roles import Principal, Role
from decisionflow_server.runtime.auth._server import AuthInterceptor, current_principal
from decisionflow_server.runtime.serving import RunningServer, start_server
from tests.security.contract import server_streaming

# One principal per role, plus one holding two roles.
TOKENS: Mapping[str, str] = {
    "rita": "rita-reviewer-token",
    "arthur": "arthur-author-token",
    "olga": "olga-operator-token",
    "walter": "walter-effect-writer-token",
    "edna": "edna-effect-reader-token",
    "audrey": "audrey-auditor-token",
    "sam": "sam-reviewer-and-author-token",
}
ROLES: Mapping[str, frozenset[Role]] = {
    "rita": frozenset({Role.REVIEWER}),
    "arthur": frozenset({Role.AUTHOR}),
    "olga": frozenset({Role.OPERATOR}),
    "walter": frozenset({Role.EFFECT_WRITER}),
    "edna": frozenset({Role.EFFECT_READER}),
    "audrey": frozenset({Role.AUDITOR}),
    "sam": frozenset({Role.REVIEWER, Role.AUTHOR}),
}
CERTIFICATE_PRINCIPALS: Mapping[str, frozenset[Role]] = {"review-console": frozenset({Role.REVIEWER})}


def credentials_document() -> dict[str, Any]:
    """Return the credentials file content for TOKENS, ROLES and CERTIFICATE_PRINCIPALS."""
    return {
        "tokens": [
            {"principal": name, "sha256": token_sha256(token), "roles": sorted(r.value for r in ROLES[name])}
            for name, token in TOKENS.items()
        ],
        "certificates": [
            {"principal": name, "roles": sorted(r.value for r in roles)}
            for name, roles in CERTIFICATE_PRINCIPALS.items()
        ],
    }


def known_credentials() -> Credentials:
    """Return the validated credentials of credentials_document()."""
    return parse_credentials(credentials_document(), "known credentials")


def token_principal(name: str) -> Principal:
    """Return the principal a call carrying TOKENS[name] is admitted as."""
    return Principal(name, ROLES[name], "token")


def bearer(name: str) -> tuple[tuple[str, str], ...]:
    """Return call metadata carrying TOKENS[name]."""
    return (("authorization", f"Bearer {TOKENS[name]}"),)


class ContractRecorder:
    """Serves every RPC of the contract with an empty response, recording (method, principal) of
    each call it runs; a refused call leaves no record. A server-streaming RPC answers one empty
    message and then stays open until the caller cancels, as WatchEvents does."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[str, Principal]] = []
        self._delay = delay

    @property
    def principals(self) -> list[Principal]:
        """The principals of the recorded calls, in order."""
        return [principal for _, principal in self.calls]

    def _answer(self, method: str) -> Callable[[bytes, Context], Any]:
        async def answer(request: bytes, context: Context) -> bytes:
            if self._delay:
                await asyncio.sleep(self._delay)  # lets concurrent calls interleave before the read
            self.calls.append((method, current_principal()))
            return b""  # the empty message is a valid response of every type

        return answer

    def _stream(self, method: str) -> Callable[[bytes, Context], AsyncIterator[bytes]]:
        answer = self._answer(method)

        async def stream(request: bytes, context: Context) -> AsyncIterator[bytes]:
            yield await answer(request, context)
            await asyncio.Event().wait()  # until the caller cancels

        return stream

    def register(self, server: grpc.aio.Server) -> Sequence[str]:
        """Add raw-bytes handlers for all_rpc_methods() to server; return the service names."""
        by_service: dict[str, dict[str, grpc.RpcMethodHandler[Any, Any]]] = {}
        for method in all_rpc_methods():
            service, name = method.strip("/").split("/")
            handler = (
                grpc.unary_stream_rpc_method_handler(self._stream(method))
                if server_streaming(method)
                else grpc.unary_unary_rpc_method_handler(self._answer(method))
            )
            by_service.setdefault(service, {})[name] = handler
        server.add_generic_rpc_handlers(
            tuple(grpc.method_handlers_generic_handler(service, handlers) for service, handlers in by_service.items())
        )
        return tuple(by_service)


@contextlib.asynccontextmanager
async def serve(
    register: Callable[[grpc.aio.Server], Sequence[str]],
    *,
    credentials: Credentials | None,
    policy: Mapping[str, frozenset[Role]] = RPC_ROLES,
    server_credentials: grpc.ServerCredentials | None = None,
) -> AsyncIterator[RunningServer]:
    """Run a server on a free 127.0.0.1 port behind an AuthInterceptor; stop it on exit."""
    running = await start_server(
        "127.0.0.1:0",
        register,
        status_table=AUTH_STATUS,
        auth=AuthInterceptor(credentials, policy),
        credentials=server_credentials,
    )
    try:
        yield running
    finally:
        await running.server.stop(None)


async def refusal(call: Any) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    """Await a call that must fail; return its status code, ErrorInfo reason and metadata."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        reason, metadata, _ = error_info(error)
        return error.code(), reason, metadata
    raise AssertionError("the call succeeded but a refusal was expected")
