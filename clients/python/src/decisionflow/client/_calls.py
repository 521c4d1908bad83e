"""The one I/O seam of the clients: send a unary call with a deadline, retry it, map its failure."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

import grpc

from decisionflow.client.errors import map_rpc_error
from decisionflow.retry import (
    CLIENT_DEFAULT,
    Clock,
    LogContext,
    RetryPolicy,
    async_retrying,
    attempt_timeout,
    call_deadline,
    retrying,
)

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")

Metadata = tuple[tuple[str, str | bytes], ...]

DEFAULT_TIMEOUT = 5.0
"""Seconds one attempt of a call may take, unless the client is given another ``timeout``."""


@dataclass(frozen=True, slots=True)
class CallSettings:
    """Per-attempt timeout, retry policy, metadata, and the injectable sleep and clock."""

    timeout: float
    policy: RetryPolicy
    metadata: Metadata
    sleep: Callable[[float], None] = time.sleep
    clock: Clock = time.monotonic

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError("timeout must be positive: every call carries a deadline")


@dataclass(frozen=True, slots=True)
class AsyncCallSettings:
    """CallSettings for asyncio clients: the sleep is awaited.

    wait_for_ready True queues each attempt until the channel is connected (or the attempt's
    deadline passes) instead of failing it at once while the channel reconnects; an attempt
    that finds no connection in time ends DEADLINE_EXCEEDED, indeterminate like any other.
    """

    timeout: float
    policy: RetryPolicy
    metadata: Metadata
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep)
    clock: Clock = time.monotonic
    wait_for_ready: bool = False

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError("timeout must be positive: every call carries a deadline")


class Client:
    """What every synchronous client takes: a channel, the per-attempt timeout, the retry policy,
    metadata for every call, the injectable sleep and clock. A subclass names its stub on
    ``self._channel`` and sends each call through ``call(..., self._settings)``."""

    def __init__(
        self,
        channel: grpc.Channel,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        policy: RetryPolicy = CLIENT_DEFAULT,
        sleep: Callable[[float], None] = time.sleep,
        metadata: Sequence[tuple[str, str | bytes]] = (),
        clock: Clock = time.monotonic,
    ) -> None:
        self._channel = channel
        self._settings = CallSettings(timeout, policy, metadata_tuple(metadata), sleep, clock)


class AsyncClient:
    """What every asyncio client takes: a ``grpc.aio`` channel, the per-attempt timeout, the retry
    policy, metadata for every call, the injectable sleep and clock.

    With wait_for_ready an attempt made while the channel reconnects waits for the connection within
    its deadline instead of failing at once. A policy or wait_for_ready not given is the class's
    default (``default_policy``, ``default_wait_for_ready``).
    """

    default_policy: ClassVar[RetryPolicy] = CLIENT_DEFAULT
    """The retry policy of a client given none."""
    default_wait_for_ready: ClassVar[bool] = False
    """wait_for_ready of a client not told (off, as on the synchronous clients)."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        metadata: Sequence[tuple[str, str | bytes]] = (),
        clock: Clock = time.monotonic,
        wait_for_ready: bool | None = None,
    ) -> None:
        self._channel = channel
        self._settings = AsyncCallSettings(
            timeout,
            self.default_policy if policy is None else policy,
            metadata_tuple(metadata),
            sleep,
            clock,
            wait_for_ready=self.default_wait_for_ready if wait_for_ready is None else wait_for_ready,
        )


def metadata_tuple(metadata: Sequence[tuple[str, str | bytes]]) -> Metadata:
    """Return metadata as the immutable tuple gRPC takes."""
    return tuple((key, value) for key, value in metadata)


def call(
    method: grpc.UnaryUnaryMultiCallable[_Request, _Response],
    request: _Request,
    settings: CallSettings,
) -> _Response:
    """Send request with a deadline on every attempt, retrying transient failures; raise a typed error."""
    # The policy's total time is also a deadline, so a hanging attempt cannot stretch the call.
    deadline = settings.clock() + settings.policy.max_total_seconds
    attempts = 0

    def attempt() -> _Response:
        nonlocal attempts
        attempts += 1
        timeout = attempt_timeout(settings.timeout, deadline, clock=settings.clock)
        return method(request, timeout=timeout, metadata=settings.metadata)

    try:
        return retrying(settings.policy, sleep=settings.sleep, deadline=deadline, clock=settings.clock)(attempt)
    except grpc.RpcError as exc:
        raise map_rpc_error(exc, attempts=attempts) from exc


async def call_async(
    method: grpc.aio.UnaryUnaryMultiCallable[_Request, _Response],
    request: _Request,
    settings: AsyncCallSettings,
    deadline: float | None = None,
    log_context: LogContext | None = None,
) -> _Response:
    """Send request on an asyncio channel with a deadline on every attempt, retrying transient failures.

    deadline is an absolute ``settings.clock()`` time; without one the policy's total time applies.
    Each retry's log line carries log_context's fields (the operation and case ids of an Apply).
    """
    deadline = call_deadline(settings.policy.max_total_seconds, deadline, clock=settings.clock)
    attempts = 0
    retrier = async_retrying(
        settings.policy, sleep=settings.sleep, deadline=deadline, clock=settings.clock, log_context=log_context
    )
    try:
        async for attempt in retrier:
            with attempt:
                attempts += 1
                timeout = attempt_timeout(settings.timeout, deadline, clock=settings.clock)
                return await method(
                    request, timeout=timeout, metadata=settings.metadata, wait_for_ready=settings.wait_for_ready
                )
    except grpc.RpcError as exc:
        raise map_rpc_error(exc, attempts=attempts) from exc
    raise AssertionError("unreachable: the retrier returns a result or re-raises the last error")
