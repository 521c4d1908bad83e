"""Bearer-token metadata, added to every call by a client interceptor. Call credentials would need
TLS; the interceptors also work over insecure loopback channels.
``decisionflow.channels.open_channel`` and ``open_aio_channel`` install them; the servers' side of
authentication is ``decisionflow_server.runtime.auth``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from decisionflow.client_interceptors import (
    AioUnaryStreamClientInterceptor,
    AioUnaryUnaryClientInterceptor,
    UnaryStreamClientInterceptor,
    UnaryUnaryClientInterceptor,
)

AUTHORIZATION = "authorization"


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Return the call metadata that authenticates with token; raise ValueError for an unusable token."""
    if not token or not token.isprintable() or any(char.isspace() for char in token):
        raise ValueError("a bearer token must be non-empty printable text without spaces")
    return ((AUTHORIZATION, f"Bearer {token}"),)


def _has_authorization(metadata: Iterable[tuple[str, Any]] | None) -> bool:
    return any(key.lower() == AUTHORIZATION for key, _ in metadata or ())


class BearerTokenInterceptor(AioUnaryUnaryClientInterceptor, AioUnaryStreamClientInterceptor):
    """grpc.aio client interceptor adding ``authorization: Bearer <token>`` to every unary call, and every
    call with a stream of responses (WatchEvents), that does not already carry an authorization header."""

    def __init__(self, token: str) -> None:
        self._metadata = bearer_metadata(token)

    def _with_token(self, client_call_details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = client_call_details.metadata
        if _has_authorization(metadata):
            return client_call_details
        return grpc.aio.ClientCallDetails(
            method=client_call_details.method,
            timeout=client_call_details.timeout,
            metadata=grpc.aio.Metadata(*(metadata or ()), *self._metadata),
            credentials=client_call_details.credentials,
            wait_for_ready=client_call_details.wait_for_ready,
        )

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        """Continue the call with the bearer token in its metadata."""
        return await continuation(self._with_token(client_call_details), request)

    async def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        """Continue the streaming call with the bearer token in its metadata."""
        return await continuation(self._with_token(client_call_details), request)


@dataclass(frozen=True, slots=True)
class _CallDetails(grpc.ClientCallDetails):
    method: str
    timeout: float | None
    metadata: Any
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


class SyncBearerTokenInterceptor(UnaryUnaryClientInterceptor, UnaryStreamClientInterceptor):
    """Synchronous client interceptor adding ``authorization: Bearer <token>`` to every unary call, and every
    call with a stream of responses (WatchEvents), that does not already carry an authorization header."""

    def __init__(self, token: str) -> None:
        self._metadata = bearer_metadata(token)

    def _with_token(self, client_call_details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = client_call_details.metadata
        if _has_authorization(metadata):
            return client_call_details
        return _CallDetails(
            method=client_call_details.method,
            timeout=client_call_details.timeout,
            metadata=(*(metadata or ()), *self._metadata),
            credentials=client_call_details.credentials,
            wait_for_ready=getattr(client_call_details, "wait_for_ready", None),
            compression=getattr(client_call_details, "compression", None),
        )

    def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        """Continue the call with the bearer token in its metadata."""
        return continuation(self._with_token(client_call_details), request)

    def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        """Continue the streaming call with the bearer token in its metadata."""
        return continuation(self._with_token(client_call_details), request)
