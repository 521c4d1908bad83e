"""The EffectPort over the real EffectReceiver: Apply through the named retry policy, with the
caller's deadline as the bound and the answer sorted into committed, refused or indeterminate.

The channel reconnects within about a second of the receiver's return (decisionflow.channels) and
each Apply waits for the connection within its deadline, so an approval made while the receiver
restarts reaches it; one whose deadline passes first is indeterminate, never a refusal.

Only a refusal of the payload ends an operation REJECTED. A refusal of the orchestrator itself
(its token unknown to the receiver, a role missing) or of the moment (overloaded, unavailable)
says nothing about the payload: the operation stays open to a re-drive once it is fixed."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc

from decisionflow import reasons
from decisionflow.channels import open_aio_channel
from decisionflow.client import AsyncReceiverClient, DecisionflowError, KeyRetentionExceeded
from decisionflow.retry import call_deadline
from decisionflow.vocabulary import EffectRequest, Receipt
from orchestrator.domain import RetentionRefusal
from orchestrator.ports import EffectIndeterminate, EffectRefused, KeyRetentionRefused, ReceiverRefusedCaller

logger = logging.getLogger(__name__)

# The receiver's answers that refuse the caller or the moment, never the payload.
CALLER_REFUSAL_CODES: frozenset[grpc.StatusCode] = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAVAILABLE,
    }
)


class ReceiverEffects:
    """Calls EffectReceiverService.Apply with the operation id as idempotency key."""

    def __init__(self, client: AsyncReceiverClient, channel: grpc.aio.Channel, timeout: float) -> None:
        self._client = client
        self._channel = channel
        self._timeout = timeout

    @classmethod
    def connect(
        cls,
        target: str,
        *,
        token: str | None,
        timeout: float,
        ca_file: Path | None = None,
        allow_cleartext_token: bool = False,
    ) -> ReceiverEffects:
        """Open an aio channel to the receiver (gRPC's own retries off; TLS when ca_file is given)
        presenting token if given (in cleartext beyond loopback only with allow_cleartext_token)."""
        channel = open_aio_channel(target, ca_file=ca_file, token=token, allow_cleartext_token=allow_cleartext_token)
        return cls(AsyncReceiverClient(channel, timeout=timeout), channel, timeout)

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close(None)

    async def apply(self, request: EffectRequest, *, deadline: float | None) -> Receipt:
        """Write the effect once; a definite refusal of the payload raises EffectRefused, a refusal of the
        caller ReceiverRefusedCaller, anything else unsure EffectIndeterminate.

        A refusal for the key retention is KeyRetentionRefused (indeterminate): this call wrote nothing,
        but an earlier attempt may have written the effect before its key was pruned.
        """
        try:
            applied = await self._client.apply(request, deadline=call_deadline(self._timeout, deadline))
        except KeyRetentionExceeded as error:
            logger.warning(
                "operation %s was first attempted beyond the receiver's key retention; escalate, never re-drive",
                request.operation_id,
                extra={"operation_id": request.operation_id, "case_id": request.case_id},
            )
            refusal = RetentionRefusal(error.first_attempted_at, error.key_retention)
            raise KeyRetentionRefused(_describe(error), refusal) from error
        except DecisionflowError as error:
            # REPLY_LOST is the receiver's fault switch: it committed and withheld the reply, so it
            # accepted the Apply; the effect's fate is simply unknown to this caller.
            if error.code in CALLER_REFUSAL_CODES and error.reason != reasons.REPLY_LOST:
                raise ReceiverRefusedCaller(_describe(error), code=error.code.name, attempts=error.attempts) from error
            if error.definite:
                raise EffectRefused(_describe(error), code=error.code.name) from error
            raise EffectIndeterminate(_describe(error), code=error.code.name) from error
        if applied.receipt.applied_at is None:
            raise EffectIndeterminate(f"receiver answered without a receipt time for {request.operation_id}")
        return applied.receipt


def _describe(error: DecisionflowError) -> str:
    reason = f" {error.reason}" if error.reason else ""
    return f"{error.code.name}{reason}: {error.message}"
