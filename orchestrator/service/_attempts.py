"""An attempt's budget and lease: how long one drive of an effect may take, and how long it holds
the operation against every other caller, on any replica.

The service bounds both, never the caller. An attempt's Apply (retries included) gets at most the
service's own attempt budget (``--receiver-timeout-seconds``); a caller's shorter deadline shortens
it, a longer one does not lengthen it. The lease the attempt records lasts that budget and a margin
to record the receiver's answer. So a holder that crashes mid-attempt pins the operation for at most
budget + margin, whatever deadline its caller set: after that a replay, RedriveOperation or a
reconciler pass may drive it again. An Approve sent with a 300 s deadline that crashed after its
decision held its operation for 301 s when the caller's deadline set the lease; it now holds it for
6 s under the default budget. And a holder known to have ended (a process of the same host that is
gone: ``orchestrator.holders``) holds it no longer: the next attempt takes its lease over at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from decisionflow.retry import call_deadline
from decisionflow.vocabulary import OPEN_STATES
from orchestrator.domain import Operation, Proposal, RecordedDecision, effect_payload
from orchestrator.store import AsyncOrchestratorStore, AttemptInFlight

logger = logging.getLogger("decisionflow.orchestrator")

# An attempt's lease lasts its Apply budget and this much more, to record the receiver's answer.
LEASE_MARGIN_SECONDS = 1.0

# A caller waiting for another replica's attempt reads the operation again after these pauses (doubling).
LEASE_POLL_FIRST_SECONDS = 0.005
LEASE_POLL_MAX_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt this call holds: its Apply ends by apply_by (a time.monotonic() instant) and its
    lease holds the operation until lease_until."""

    apply_by: float
    lease_until: datetime


def _not_known_to_have_ended(_holder: str) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class AttemptBudget:
    """The service's own bound on each attempt, the name its leases are taken under, and which other
    holders it knows have ended."""

    # At most this long for one attempt's Apply, retries included (--receiver-timeout-seconds).
    seconds: float
    # Who holds the leases this service takes: its process (host:pid:instance), for operators.
    holder: str = "orchestrator"
    # True for a holder known to have ended (a process of this host that is gone, orchestrator.holders):
    # its lease is taken over at once. Never true for a holder that may still be running.
    ended: Callable[[str], bool] = _not_known_to_have_ended

    def start(self, now: datetime, deadline: float | None) -> Attempt:
        """Return an attempt starting at now (wall clock) whose Apply ends by the earlier of the caller's
        deadline (a time.monotonic() instant, None: none) and the end of this budget."""
        left = min(self.seconds, max(0.0, call_deadline(self.seconds, deadline) - time.monotonic()))
        return Attempt(time.monotonic() + left, now + timedelta(seconds=left + LEASE_MARGIN_SECONDS))


class Leases:
    """Attempts recorded under a lease over the store: one holder per operation across replicas."""

    def __init__(self, store: AsyncOrchestratorStore, budget: AttemptBudget, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._budget = budget
        self._clock = clock

    async def take(
        self, proposal: Proposal, decided: RecordedDecision, deadline: float
    ) -> tuple[Operation, Attempt] | Operation:
        """Record an attempt under a lease (returned with it), or return the operation as another
        attempt's answer left it, or as it stands when deadline passed while that attempt held it. A
        lease whose holder is known to have ended (a process of this host that is gone) is taken over."""
        payload, digest = effect_payload(proposal, decided)
        ended: str | None = None
        while True:
            now = self._clock()
            attempt = self._budget.start(now, deadline)
            try:
                operation = await self._store.record_attempt(
                    proposal.operation_id,
                    payload,
                    digest,
                    now,
                    attempt.lease_until,
                    holder=self._budget.holder,
                    ended_holder=ended,
                )
                return operation, attempt
            except AttemptInFlight as held:
                holder = held.operation.attempt_lease_holder
                if holder is not None and holder != ended and self._budget.ended(holder):
                    logger.warning(
                        "taking over the attempt lease of %s, a process of this host that has ended",
                        holder,
                        extra={"operation_id": proposal.operation_id, "case_id": proposal.case_id},
                    )
                    ended = holder
                    continue
                waited = await self._await_lease(held.operation, deadline)
                if waited is not None:
                    return waited

    async def _await_lease(self, operation: Operation, deadline: float) -> Operation | None:
        """Wait for another replica's attempt: return the operation once settled or once deadline passed,
        None once its lease was released or has passed (the caller may then drive)."""
        pause = LEASE_POLL_FIRST_SECONDS
        while operation.state in OPEN_STATES:
            lease = operation.attempt_lease_until
            if lease is None:
                return None
            left_on_lease = (lease - self._clock()).total_seconds()
            if left_on_lease <= 0:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return operation
            await asyncio.sleep(min(pause, left, left_on_lease))
            pause = min(pause * 2, LEASE_POLL_MAX_SECONDS)
            operation = await self._store.get_operation(operation.operation_id)
        return operation
