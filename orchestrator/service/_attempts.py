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

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from decisionflow.retry import call_deadline

# An attempt's lease lasts its Apply budget and this much more, to record the receiver's answer.
LEASE_MARGIN_SECONDS = 1.0


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
