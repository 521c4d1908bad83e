"""Seeded fault injection for a gRPC server: lost replies and answers held past the caller's deadline.

Enabled only by configuration (the receiver's ``faults`` setting). A plan is a comma-separated
list of ``key=value``:

- ``lose_reply=P``: with probability P the handler runs (and commits), then the caller gets
  UNAVAILABLE instead of the answer;
- ``delay=P``: with probability P the handler runs (and commits), then the answer is held until
  the caller's deadline has passed, so the caller sees DEADLINE_EXCEEDED;
- ``seed=N``: the seed of the draws (default 0).

Only successful unary calls are faulted, outside the ``grpc.*`` services (health, reflection): a
refusal is passed on as it is, because a fault that hides a refusal would turn a definite answer
into an indeterminate one that the server never gave. Whether a call is faulted is drawn from
SHA-256 over (seed, method, operation id, n), where the operation id is the request's
``operation_id`` field when it has one and n counts that id's calls: the same seed faults the same
calls of each operation whatever the interleaving of concurrent callers, so a run can be replayed.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import inspect
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from decisionflow_server.foundation.handlers import Context, ServerInterceptor

logger = logging.getLogger(__name__)

EXEMPT_PREFIX = "/grpc."
# With no caller deadline there is nothing to outlast: the answer is held this long, then withheld.
HOLD_WITHOUT_DEADLINE_SECONDS = 1.0
# Held a little past the deadline so the caller's own timer has certainly fired.
HOLD_MARGIN_SECONDS = 0.05


class Fault(enum.StrEnum):
    """What happens to a call's answer."""

    NONE = "none"
    LOSE_REPLY = "lose_reply"
    DELAY = "delay"


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Probabilities of each fault and the seed of the draws; all zero means no fault is injected."""

    lose_reply: float = 0.0
    delay: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("lose_reply", "delay"):
            value = getattr(self, name)
            if not math.isfinite(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"faults: {name} must be a probability from 0 to 1, not {value!r}")
        if self.lose_reply + self.delay > 1.0:
            raise ValueError("faults: lose_reply and delay together must not exceed 1")

    @property
    def enabled(self) -> bool:
        """True when some call may be faulted."""
        return self.lose_reply > 0 or self.delay > 0

    @classmethod
    def parse(cls, spec: str) -> FaultPlan:
        """Return the plan written as ``lose_reply=P,delay=P,seed=N``; raise ValueError on anything else."""
        values: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or key not in ("lose_reply", "delay", "seed"):
                raise ValueError(f"faults: {part!r} is not lose_reply=P, delay=P or seed=N")
            if key in values:
                raise ValueError(f"faults: {key} given twice")
            values[key] = value.strip()
        try:
            return cls(
                lose_reply=float(values.get("lose_reply", "0")),
                delay=float(values.get("delay", "0")),
                seed=int(values.get("seed", "0")),
            )
        except ValueError as exc:
            raise ValueError(f"faults: {spec!r}: {exc}") from exc

    def draw(self, method: str, key: str, n: int) -> Fault:
        """Return the fault for the n-th call of method for key (deterministic in seed, method, key, n)."""
        digest = hashlib.sha256(f"{self.seed}\x00{method}\x00{key}\x00{n}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        if u < self.lose_reply:
            return Fault.LOSE_REPLY
        if u < self.lose_reply + self.delay:
            return Fault.DELAY
        return Fault.NONE


_Behaviour = Callable[[Any, Context], Awaitable[Any]]


class FaultInterceptor(ServerInterceptor):
    """Lets each unary handler run, then, as the plan draws, loses its reply or holds it past the deadline."""

    def __init__(self, plan: FaultPlan, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._plan = plan
        self._sleep = sleep
        self._calls: Counter[tuple[str, str]] = Counter()
        self.injected: Counter[Fault] = Counter()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """Return the handler, wrapped when it is a unary coroutine outside the grpc.* services."""
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if (
            handler is None
            or method.startswith(EXEMPT_PREFIX)
            or handler.request_streaming
            or handler.response_streaming
            or not inspect.iscoroutinefunction(handler.unary_unary)
        ):
            return handler
        return grpc.unary_unary_rpc_method_handler(
            self._wrap(handler.unary_unary, method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _wrap(self, behaviour: _Behaviour, method: str) -> _Behaviour:
        async def faulty(request: Any, context: Context) -> Any:
            response = await behaviour(request, context)
            key = str(getattr(request, "operation_id", ""))
            # Counted after the handler ran: a refused call is not faulted and does not shift the draws.
            self._calls[(method, key)] += 1
            fault = self._plan.draw(method, key, self._calls[(method, key)])
            if fault is Fault.NONE:
                return response
            self.injected[fault] += 1
            logger.warning(
                "fault injected: %s",
                fault.value,
                extra={"rpc": method, "operation_id": key or None, "outcome": fault.value},
            )
            if fault is Fault.LOSE_REPLY:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "reply lost (fault injection)")
            remaining = context.time_remaining()
            hold = HOLD_WITHOUT_DEADLINE_SECONDS if remaining is None else remaining + HOLD_MARGIN_SECONDS
            await self._sleep(hold)
            # Normally the deadline has cancelled the call by now; never deliver the held answer.
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "reply held past the deadline (fault injection)")

        return faulty
