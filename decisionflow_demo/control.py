"""The control experiment: a naive client that retries a lost reply with a fresh random key per attempt.

It calls the receiver's Apply directly, as a service without decisionflow's operation identity
would: the key is drawn inside the retried block, so after a lost reply the retry is a new
effect to the receiver, and one approval becomes two records.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import tenacity

from decisionflow.channels import insecure_channel
from decisionflow.client import CaseId, EffectRequest, OperationId, ReceiverClient, Unavailable
from decisionflow.retry import NO_RETRY
from decisionflow_server.foundation.payload import APPROVE, EffectPayload


@dataclass(frozen=True)
class NaiveAttempt:
    """One Apply the naive client sent: the key it drew and what came back."""

    operation_id: str
    result: str


def _random_operation_id() -> str:
    return "op-v1-" + secrets.token_hex(32)


def _payload(operation_id: str, case_id: str, kind: str, body: str, reviewer: str) -> EffectPayload:
    return EffectPayload(
        operation_id=operation_id,
        case_id=case_id,
        action=kind,
        body=body,
        evidence_id="",
        policy_id="",
        reviewer=reviewer,
        decision=APPROVE,
        decided_at=datetime.now(UTC),
    )


def run_naive_client(
    target: str,
    token_metadata: tuple[tuple[str, str], ...],
    case_id: str,
    kind: str,
    body: str,
    *,
    attempts: int = 3,
    on_attempt: Callable[[NaiveAttempt], None] = lambda attempt: None,
) -> list[NaiveAttempt]:
    """Apply one approved reply, retrying an unavailable receiver with a new random key each time."""
    sent: list[NaiveAttempt] = []
    channel = insecure_channel(target)
    try:
        receiver = ReceiverClient(channel, timeout=5.0, policy=NO_RETRY, metadata=token_metadata)
        for attempt in tenacity.Retrying(
            stop=tenacity.stop_after_attempt(attempts),
            wait=tenacity.wait_fixed(0.1),
            retry=tenacity.retry_if_exception_type(Unavailable),
            reraise=True,
        ):
            with attempt:
                # The defect under test: the idempotency key is drawn per attempt, not per approval.
                operation_id = _random_operation_id()
                payload = _payload(operation_id, case_id, kind, body, "rita")
                request = EffectRequest(
                    OperationId(operation_id), CaseId(case_id), kind, payload.encode(), payload.digest()
                )
                try:
                    applied = receiver.apply(request)
                except Unavailable as lost:
                    sent.append(NaiveAttempt(operation_id, f"{lost.code.name} {lost.reason}".strip()))
                    on_attempt(sent[-1])
                    raise
                sent.append(NaiveAttempt(operation_id, applied.result.value))
                on_attempt(sent[-1])
    finally:
        channel.close()
    return sent
