"""The relay's one seam to NATS JetStream (nats-py): connect, make sure the stream exists, publish one
message and read its acknowledgement. Every failure of a publish, whatever nats-py calls it, leaves
this module as ``PublishFailed``; a failure to reach the broker at start is retried here until it
answers or the relay is told to stop."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig

from decisionflow_relay.backoff import Backoff
from decisionflow_relay.domain import MSG_ID_HEADER, Outgoing
from decisionflow_relay.errors import PublishFailed

logger = logging.getLogger("decisionflow.relay")

# The stream's window within which JetStream drops a second message with the same Nats-Msg-Id.
DUPLICATE_WINDOW_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """The stream the relay publishes into, as it creates it when missing."""

    name: str
    subjects: str
    replicas: int

    def config(self) -> StreamConfig:
        """The stream's configuration: file storage, the duplicate window, every subject under the prefix."""
        return StreamConfig(
            name=self.name,
            subjects=[self.subjects],
            num_replicas=self.replicas,
            storage=StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW_SECONDS,
            description="decisionflow events: the orchestrator's audit log leaves, relayed by decisionflow-relay",
        )


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """How the relay reaches NATS."""

    servers: tuple[str, ...]
    ca_file: Path | None = None
    credentials_file: Path | None = None
    publish_timeout: float = 5.0


def _tls(ca_file: Path | None) -> ssl.SSLContext | None:
    return None if ca_file is None else ssl.create_default_context(cafile=str(ca_file))


# How long one attempt to connect (to any of the servers) may take before it is abandoned and retried.
CONNECT_SECONDS = 5.0


class JetStreamPublisher:
    """A connection to NATS and its JetStream context; ``publish`` returns whether JetStream counted the
    message a duplicate (the same Nats-Msg-Id within the duplicate window)."""

    def __init__(self, broker: BrokerSettings, stream: StreamSettings) -> None:
        self._broker = broker
        self._stream = stream
        self._nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self._closing = False

    async def connect(self, stopping: Callable[[], bool]) -> bool:
        """Connect and make sure the stream exists, retrying with back-off (logged once) until it works;
        False when stopping() turned true first."""
        backoff, logged = Backoff(), False
        while not stopping():
            try:
                await self._connect_once()
                await self._ensure_stream()
            except (nats.errors.Error, OSError, TimeoutError) as exc:
                await self._drop()
                if not logged:
                    logger.error(
                        "NATS at %s cannot be used yet (%s: %s); retrying with back-off",
                        ",".join(self._broker.servers),
                        type(exc).__name__,
                        exc,
                    )
                    logged = True
                await asyncio.sleep(backoff.pause())
                continue
            if logged:
                logger.warning("NATS at %s answers again", ",".join(self._broker.servers))
            return True
        return False

    async def _connect_once(self) -> None:
        async def disconnected() -> None:
            if not self._closing:
                logger.warning("disconnected from NATS; reconnecting")

        async def reconnected() -> None:
            url = self._nc.connected_url if self._nc is not None else None
            logger.warning("reconnected to NATS at %s", None if url is None else url.netloc)

        async def error(exc: Exception) -> None:
            logger.debug("NATS client: %s: %s", type(exc).__name__, exc)

        # The client object first, so a connect that times out can still be closed (_drop); nats-py retries an
        # unreachable server for ever inside connect() when reconnects are unbounded, so each attempt is bounded
        # here, and connect() above sees the stop between attempts.
        self._nc = NATS()
        await asyncio.wait_for(self._connect_client(self._nc, disconnected, reconnected, error), CONNECT_SECONDS)
        self._js = self._nc.jetstream(timeout=self._broker.publish_timeout)

    async def _connect_client(
        self,
        client: NATS,
        disconnected: Callable[[], Awaitable[None]],
        reconnected: Callable[[], Awaitable[None]],
        error: Callable[[Exception], Awaitable[None]],
    ) -> None:
        await client.connect(
            servers=list(self._broker.servers),
            name="decisionflow-relay",
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=1,
            connect_timeout=2,
            tls=_tls(self._broker.ca_file),
            user_credentials=None if self._broker.credentials_file is None else str(self._broker.credentials_file),
            disconnected_cb=disconnected,
            reconnected_cb=reconnected,
            error_cb=error,
        )

    async def _ensure_stream(self) -> None:
        assert self._js is not None
        try:
            info = await self._js.stream_info(self._stream.name)
        except nats.js.errors.NotFoundError:
            await self._js.add_stream(self._stream.config())
            logger.info(
                "created stream %s (subjects %s, %d replica(s), file storage, duplicate window %g s)",
                self._stream.name,
                self._stream.subjects,
                self._stream.replicas,
                DUPLICATE_WINDOW_SECONDS,
            )
            return
        found = info.config
        if self._stream.subjects not in (found.subjects or ()):
            logger.warning(
                "stream %s exists and does not capture %s (its subjects: %s): publishes will be refused",
                self._stream.name,
                self._stream.subjects,
                ", ".join(found.subjects or ()),
            )
        if (found.duplicate_window or 0) < DUPLICATE_WINDOW_SECONDS:
            logger.warning(
                "stream %s exists with a duplicate window of %g s (the relay creates %g s): a re-send after a "
                "longer outage reaches consumers twice",
                self._stream.name,
                found.duplicate_window or 0,
                DUPLICATE_WINDOW_SECONDS,
            )

    async def publish(self, message: Outgoing) -> bool:
        """Publish message into the stream and return whether JetStream counted it a duplicate; raise
        PublishFailed when it was not acknowledged (the message may or may not be stored)."""
        if self._js is None:
            raise PublishFailed(message.subject, "not connected")
        try:
            ack = await self._js.publish(
                message.subject,
                message.payload,
                timeout=self._broker.publish_timeout,
                stream=self._stream.name,
                headers={MSG_ID_HEADER: message.message_id},
            )
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise PublishFailed(message.subject, f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc
        return bool(ack.duplicate)

    async def _drop(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            try:
                await nc.close()
            except (nats.errors.Error, OSError, TimeoutError) as exc:
                logger.debug("closing the NATS connection: %s", exc)

    async def close(self) -> None:
        """Close the connection (a clean stop: its disconnection is not logged)."""
        self._closing = True
        await self._drop()


__all__: Sequence[str] = [
    "DUPLICATE_WINDOW_SECONDS",
    "BrokerSettings",
    "JetStreamPublisher",
    "StreamSettings",
]
