"""Per-author budgets on the calls that write proposals (StartReview and EditProposal).

Three limits, all per principal (the authenticated caller, never a request field):

- **calls**: a token bucket of ``call_burst`` calls, refilled at ``calls_per_second``;
- **content bytes**: a token bucket of ``content_bytes_per_minute`` bytes of proposal content
  (``ProposalContent.size_bytes``), refilled at a sixtieth of that per second;
- **open reviews**: at most ``open_reviews`` undecided proposals of the author in the reviewers'
  inbox, counted in the database by the store when a call would add one (so it holds across
  replicas and workers); the two buckets are not.

The buckets live in the server process (``AuthorBudgets``). Each worker (``--workers``) and each
replica keeps its own, so a principal whose calls are spread over N processes gets up to N times
the configured rate and bytes; the open-review cap is exact whatever the topology.

Contract of ``AuthorBudgets.admit``: either the call is charged one call and its content bytes, or
nothing is charged and it raises CallRateExceeded (checked first) or ContentBudgetExceeded with the
delay after which the same request fits. A bucket starts full and refills continuously up to its
size. Time is read from an injected monotonic clock, so tests move it instead of sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from decisionflow_server.foundation.token_bucket import TokenBucket
from orchestrator.errors import CallRateExceeded, ContentBudgetExceeded

# Buckets kept at once. A principal idle long enough for its buckets to refill loses nothing when
# its entry is dropped (a new one starts full), so the least recently seen are dropped first.
MAX_PRINCIPALS = 10_000


@dataclass(frozen=True, slots=True)
class AuthorLimits:
    """The per-author budgets (the ``--author-*`` settings, orchestrator.config); 0 turns a limit off."""

    calls_per_second: float
    """StartReview and EditProposal calls per second one principal may sustain, per server process."""
    call_burst: int
    """Calls one principal may make at once before the rate applies (the call bucket's size)."""
    content_bytes_per_minute: int
    """Bytes of proposal content one principal may send per minute, per server process (also the most at once)."""
    open_reviews: int
    """Undecided proposals of one author the reviewers' inbox may hold, counted in the database."""


NO_LIMITS = AuthorLimits(calls_per_second=0, call_burst=0, content_bytes_per_minute=0, open_reviews=0)


def _delay(seconds: float) -> timedelta:
    # Rounded up to the millisecond, so a caller that waits exactly this long finds the tokens there.
    return timedelta(milliseconds=max(1, math.ceil(seconds * 1000)))


class AuthorBudgets:
    """The call and content-byte buckets of every principal, in this process."""

    def __init__(self, limits: AuthorLimits, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[TokenBucket | None, TokenBucket | None]] = OrderedDict()

    def _new(self, now: float) -> tuple[TokenBucket | None, TokenBucket | None]:
        limits = self.limits
        calls = None
        if limits.calls_per_second > 0:
            calls = TokenBucket(limits.calls_per_second, limits.call_burst, limits.call_burst, now)
        content = None
        if limits.content_bytes_per_minute > 0:
            size = limits.content_bytes_per_minute
            content = TokenBucket(size / 60.0, size, size, now)
        return calls, content

    def _buckets_of(self, principal: str, now: float) -> tuple[TokenBucket | None, TokenBucket | None]:
        buckets = self._buckets.get(principal)
        if buckets is None:
            if len(self._buckets) >= MAX_PRINCIPALS:
                self._forget_one(now)
            buckets = self._buckets[principal] = self._new(now)
        else:
            self._buckets.move_to_end(principal)
        return buckets

    def _forget_one(self, now: float) -> None:
        # The least recently seen principal whose buckets are full, else simply the least recent.
        for principal, buckets in self._buckets.items():
            for bucket in buckets:
                if bucket is not None:
                    bucket.refill(now)
            if all(bucket is None or bucket.full for bucket in buckets):
                del self._buckets[principal]
                return
        self._buckets.popitem(last=False)

    def admit(self, principal: str, content_bytes: int) -> None:
        """Charge principal one call and content_bytes bytes, or charge nothing and raise CallRateExceeded or
        ContentBudgetExceeded saying how long until the same request fits."""
        if self.limits.calls_per_second <= 0 and self.limits.content_bytes_per_minute <= 0:
            return  # both off: nothing to count, nothing to keep
        with self._lock:
            now = self._monotonic()
            calls, content = self._buckets_of(principal, now)
            if calls is not None:
                calls.refill(now)
                wait = calls.wait_for(1)
                if wait > 0:
                    raise CallRateExceeded(principal, _delay(wait))
            if content is not None:
                content.refill(now)
                # A request larger than the whole bucket is charged as a full bucket: it passes once
                # the bucket has refilled, never sooner (configuration keeps the bucket larger anyway).
                cost = min(content_bytes, content.size)
                wait = content.wait_for(cost)
                if wait > 0:
                    raise ContentBudgetExceeded(principal, _delay(wait), content_bytes)
                content.tokens -= cost
            if calls is not None:
                calls.tokens -= 1
