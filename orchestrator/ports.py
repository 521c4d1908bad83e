"""The orchestrator's port to the EffectReceiver and the ways an effect can fail to commit.

    EffectRefused                  a definite refusal of the payload: the operation ends REJECTED
    EffectIndeterminate            the effect may or may not exist: the operation stays UNKNOWN
    ├── ReceiverRefusedCaller      the receiver refused the orchestrator itself, or had no capacity
    └── KeyRetentionRefused        first attempt beyond the receiver's key retention: escalate

The service depends only on this Protocol; ``orchestrator.effects`` implements it over gRPC
and tests may stand in for it.
"""

from __future__ import annotations

from typing import Protocol

from decisionflow.vocabulary import EffectRequest, Receipt
from orchestrator.domain import RetentionRefusal


class EffectRefused(Exception):
    """The receiver definitely refused the payload (key reused with other content, invalid); nothing was written.

    code names the receiver's gRPC status.
    """

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class EffectIndeterminate(Exception):
    """The effect may or may not have been written (deadline, unavailable after send, crash).

    code names the receiver's gRPC status ("" when the call ended without one).
    """

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class ReceiverRefusedCaller(EffectIndeterminate):
    """The Apply ended UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED or UNAVAILABLE: the receiver
    refused the orchestrator or the moment, or could not be reached, never the payload; the operation
    stays open to a re-drive, and an operator must fix the credentials or the receiver.

    may_have_written is False only when the one attempt made was refused before any work (its code
    one of the first three): UNAVAILABLE is also how a reply lost after the receiver committed ends,
    and a retried call's earlier attempts ended unsure.
    """

    def __init__(self, message: str, *, code: str, attempts: int = 1) -> None:
        super().__init__(message, code=code)
        self.attempts = attempts
        self.may_have_written = code == "UNAVAILABLE" or attempts > 1


class KeyRetentionRefused(EffectIndeterminate):
    """The receiver refused an Apply first attempted beyond its key retention: this call wrote nothing, but
    an earlier attempt may have written the effect before its key was pruned; escalate, never re-drive."""

    def __init__(self, message: str, refusal: RetentionRefusal) -> None:
        super().__init__(message, code="FAILED_PRECONDITION")
        self.refusal = refusal


class EffectPort(Protocol):
    """The seam to the EffectReceiver: Apply with the operation id as idempotency key.

    request.first_attempted_at is the time the receiver judges its key retention by; deadline is
    an absolute time.monotonic() (None: the port's own timeout).
    """

    async def apply(self, request: EffectRequest, *, deadline: float | None) -> Receipt:
        """Write the effect of request once; raise EffectRefused or EffectIndeterminate (also when the receiver
        refuses an operation first attempted beyond its key retention: the effect may exist)."""
        ...
