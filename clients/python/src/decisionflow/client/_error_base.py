"""The base of the client's typed errors (``decisionflow.client.errors``): the attributes every failure
carries, whether it is definite by its status, and the registry of the class each declared reason is
raised as (a class names its reason with ``reason=``). Read through ``decisionflow.client.errors``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import grpc

from decisionflow import reasons
from decisionflow.reasons import FieldViolation

# The statuses that are definite refusals, and those that depend on who calls or on state, not on the
# request's bytes: after an earlier indeterminate attempt of the same call those prove nothing about it.
DEFINITE_CODES: frozenset[grpc.StatusCode] = frozenset(
    grpc.StatusCode[rule.status] for rule in reasons.STATUS_RULES if rule.definite
)
CALLER_DEPENDENT_CODES: frozenset[grpc.StatusCode] = frozenset(
    grpc.StatusCode[rule.status] for rule in reasons.STATUS_RULES if rule.caller_dependent
)
# Statuses that are indeterminate without a reason: one made definite by its reason (CHECKPOINT_SAVE_FAILED's
# UNAVAILABLE) speaks for its own attempt only.
INDETERMINATE_CODES: frozenset[grpc.StatusCode] = frozenset(
    grpc.StatusCode[rule.status] for rule in reasons.STATUS_RULES if not rule.definite
)


# The class raised for each declared reason: each class that names one registers itself (``reason=``).
BY_REASON: dict[tuple[grpc.StatusCode, str], type[DecisionflowError]] = {}


class DecisionflowError(Exception):
    """A call failed; the attributes carry the status, the ErrorInfo and whether it is definite."""

    # True for a class whose refusal is definite whatever its status code says (None: by the code).
    always_definite: ClassVar[bool | None] = None

    def __init_subclass__(cls, reason: str = "", **kwargs: Any) -> None:
        """A class that names a declared reason is the one raised for it, with the status it is declared with."""
        super().__init_subclass__(**kwargs)
        if reason:
            code = grpc.StatusCode[reasons.refusal(reason).status]
            if (code, reason) in BY_REASON:
                raise TypeError(f"{cls.__name__} and {BY_REASON[code, reason].__name__} both name {reason}")
            BY_REASON[code, reason] = cls

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[FieldViolation] = (),
        attempts: int = 1,
        definite: bool | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})
        self.violations: tuple[FieldViolation, ...] = tuple(violations)
        self.attempts = attempts
        self.retry_after = retry_after
        self.definite: bool = definite_by_status(type(self), code) if definite is None else definite

    @property
    def operation_id(self) -> str:
        """The operation the server named in its refusal ("" when it named none)."""
        return self.metadata.get(reasons.OPERATION_ID, "")


def definite_by_status(cls: type[DecisionflowError], code: grpc.StatusCode) -> bool:
    """Whether an error of cls with code is definite when nothing else is known (the first attempt)."""
    return cls.always_definite if cls.always_definite is not None else code in DEFINITE_CODES
