"""The orchestrator's port to the EffectReceiver and the two ways an effect can fail to commit.

The service depends only on this Protocol; ``orchestrator.effects`` implements it over gRPC
and tests may stand in for it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from orchestrator.domain import Receipt


class EffectRefused(Exception):
    """The receiver definitely refused the effect; nothing was written."""


class EffectIndeterminate(Exception):
    """The effect may or may not have been written (deadline, unavailable after send, crash)."""


class EffectPort(Protocol):
    """The seam to the EffectReceiver: Apply with the operation id as idempotency key."""

    async def apply(
        self,
        operation_id: str,
        case_id: str,
        kind: str,
        payload: bytes,
        payload_digest: str,
        *,
        deadline: float | None,
        first_attempted_at: datetime | None = None,
    ) -> Receipt:
        """Write the effect once; raise EffectRefused or EffectIndeterminate (also when the receiver refuses an
        operation first attempted beyond its key retention: the effect may exist)."""
        ...
