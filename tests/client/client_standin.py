"""A scripted stand-in for the decisionflow services, served by a real gRPC server on a free port.

The clients are what is under test, so the server side is a script: per method, a queue of
steps (fail with a status, possibly rich; hold the call; or answer), then a default answer.
Every call is recorded with its request, metadata and the deadline it carried.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import Message

from decisionflow.v1 import effect_receiver_pb2, operations_pb2, review_pb2
from decisionflow_server.foundation.errors import DomainError
from decisionflow_server.runtime.rpc_errors import rich_status

SERVICES = (
    review_pb2.DESCRIPTOR.services_by_name["ReviewService"],
    effect_receiver_pb2.DESCRIPTOR.services_by_name["EffectReceiverService"],
    operations_pb2.DESCRIPTOR.services_by_name["OperationsService"],
)


@dataclass(frozen=True)
class Fail:
    """Fail the call with code; with error, as a rich status (ErrorInfo, BadRequest)."""

    code: grpc.StatusCode
    error: DomainError | None = None
    hold: float = 0.0  # seconds to hold the call first (ends early if the client gives up)


Answer = Message | Callable[[Any], Message]
Step = Fail | Answer


@dataclass(frozen=True)
class Received:
    """One call as the server saw it."""

    method: str
    request: Any
    time_remaining: float | None
    metadata: dict[str, str | bytes]


@dataclass
class Script:
    """Scripted steps and default answers per method, and the calls received."""

    _steps: dict[str, deque[Step]] = field(default_factory=dict)
    _answers: dict[str, Answer] = field(default_factory=dict)
    _received: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def then(self, method: str, *steps: Step) -> Script:
        """Queue steps for the next calls of method (by its proto name, e.g. "Approve")."""
        with self._lock:
            self._steps.setdefault(method, deque()).extend(steps)
        return self

    def answer(self, method: str, answer: Answer) -> Script:
        """Answer method with answer once its queued steps are used up."""
        with self._lock:
            self._answers[method] = answer
        return self

    def calls(self, method: str) -> list[Received]:
        """Return the calls of method received so far, in order."""
        with self._lock:
            return [r for r in self._received if r.method == method]

    def handle(self, method: str, response_type: type[Message], request: Any, context: grpc.ServicerContext) -> Any:
        """Record the call, then play its next step."""
        metadata = dict(context.invocation_metadata())
        with self._lock:
            self._received.append(Received(method, request, context.time_remaining(), metadata))
            queue = self._steps.get(method)
            step: Step | None = queue.popleft() if queue else self._answers.get(method)
        if step is None:
            return response_type()
        if isinstance(step, Fail):
            end = time.monotonic() + step.hold
            while context.is_active() and time.monotonic() < end:
                time.sleep(0.005)
            if step.error is not None:
                context.abort_with_status(rich_status(step.code, step.error))
            context.abort(step.code, f"scripted {step.code.name}")
        if isinstance(step, Message):
            return step
        return step(request)


@dataclass(frozen=True)
class StandIn:
    """A running stand-in: its address and its script."""

    target: str
    script: Script


def _handlers(script: Script) -> list[grpc.GenericRpcHandler[Any, Any]]:
    handlers = []
    for service in SERVICES:
        methods = {}
        for method in service.methods:
            request_type = message_factory.GetMessageClass(method.input_type)
            response_type = message_factory.GetMessageClass(method.output_type)

            def behaviour(
                request: Any,
                context: grpc.ServicerContext,
                name: str = method.name,
                response: type[Message] = response_type,
            ) -> Any:
                return script.handle(name, response, request, context)

            methods[method.name] = grpc.unary_unary_rpc_method_handler(
                behaviour,
                request_deserializer=request_type.FromString,
                response_serializer=response_type.SerializeToString,
            )
        handlers.append(grpc.method_handlers_generic_handler(service.full_name, methods))
    return handlers


@contextmanager
def standin(credentials: grpc.ServerCredentials | None = None) -> Iterator[StandIn]:
    """Run a stand-in server on a free loopback port (TLS with credentials) for the duration of the block."""
    script = Script()
    server = grpc.server(ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers(_handlers(script))
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        yield StandIn(f"127.0.0.1:{port}", script)
    finally:
        server.stop(None)


class FakeClock:
    """A monotonic clock that only moves when a recorded sleep says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        """Return the current fake time."""
        return self.now


class Sleeps:
    """Records each requested wait (and the fake time it started at) instead of sleeping."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock
        self.waits: list[float] = []
        self.started_at: list[float] = []

    def __call__(self, seconds: float) -> None:
        """Record a wait and advance the fake clock by it."""
        self.started_at.append(self.clock.now if self.clock else time.monotonic())
        self.waits.append(seconds)
        if self.clock is not None:
            self.clock.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        """Record a wait like __call__, as an awaitable."""
        self(seconds)
        await asyncio.sleep(0)
