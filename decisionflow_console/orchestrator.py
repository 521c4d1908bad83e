"""The console's one way to the orchestrator: a ``grpc.aio`` channel opened with the server's event
loop, and clients that carry the signed-in person's own access token on each call.

The channel itself carries no credentials: whoever is signed in is who calls, so the orchestrator's
role checks (and its four-eyes rule) apply to that person and nobody else.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from decisionflow.channels import check_cleartext_token, open_aio_channel
from decisionflow.client import AsyncAuditClient, AsyncOperationsClient, AsyncReviewClient, Caller
from decisionflow.retry import CLIENT_DEFAULT, NO_RETRY

# Stands for any person's token in the start-up check: a token that could not travel safely is refused.
_SOME_TOKEN = "person-access-token"  # noqa: S105 (a stand-in, not a secret)


class Orchestrator:
    """Opens the channel on start, closes it on stop, and hands out per-person clients."""

    def __init__(
        self, target: str, *, ca_file: Path | None, allow_cleartext_token: bool, timeout_seconds: float
    ) -> None:
        check_cleartext_token(target, ca_file=ca_file, token=_SOME_TOKEN, allow_cleartext_token=allow_cleartext_token)
        self._target = target
        self._ca_file = ca_file
        self._allow_cleartext_token = allow_cleartext_token
        self._timeout = timeout_seconds
        self._channel: grpc.aio.Channel | None = None

    async def start(self) -> None:
        """Open the channel (inside the event loop that will use it)."""
        self._channel = open_aio_channel(
            self._target, ca_file=self._ca_file, allow_cleartext_token=self._allow_cleartext_token
        )

    async def stop(self) -> None:
        """Close the channel."""
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None

    def review(self, access_token: str) -> AsyncReviewClient:
        """Return a ReviewService client that calls as the holder of access_token."""
        return AsyncReviewClient(
            self._open(), timeout=self._timeout, policy=CLIENT_DEFAULT, metadata=_bearer(access_token)
        )

    def operations(self, access_token: str) -> AsyncOperationsClient:
        """Return an OperationsService client that calls as the holder of access_token."""
        return AsyncOperationsClient(
            self._open(), timeout=self._timeout, policy=CLIENT_DEFAULT, metadata=_bearer(access_token)
        )

    def audit(self, access_token: str) -> AsyncAuditClient:
        """Return an AuditService client that calls as the holder of access_token."""
        return AsyncAuditClient(
            self._open(), timeout=self._timeout, policy=CLIENT_DEFAULT, metadata=_bearer(access_token)
        )

    async def caller(self, access_token: str) -> Caller:
        """Return who the orchestrator takes the holder of access_token to be, with their roles (GetCaller),
        in one attempt: a failure is asked again on the person's next request, not retried here."""
        client = AsyncReviewClient(self._open(), timeout=self._timeout, policy=NO_RETRY, metadata=_bearer(access_token))
        return await client.get_caller()

    def _open(self) -> grpc.aio.Channel:
        if self._channel is None:
            raise RuntimeError("the orchestrator channel is not open (start() runs in the app's lifespan)")
        return self._channel


def _bearer(access_token: str) -> list[tuple[str, str | bytes]]:
    return [("authorization", "Bearer " + access_token)]
