"""The budget of sign-ins each client address may start (``--sign-ins-per-minute``).

``GET /login`` needs no account, so anyone can ask for it in a loop; each costs the console the
authorization request's secrets (state, nonce, PKCE verifier) and a signed cookie, about 3 ms. Measured
when each also loaded the CA bundle and started a server-side session: eight anonymous clients looping
on it moved a reviewer's inbox from p50 14 ms to 1,792 ms; without those, still to 79 ms, with this
budget 39 ms on the same loaded machine. So each address has a token bucket of
``--sign-ins-per-minute`` sign-ins, refilled continuously at that rate; a sign-in over it is answered
429 with the seconds until the next one fits, and costs nothing more.

The address is the connection's peer as the console sees it: behind a proxy, the proxy's. Buckets
live in this process; at MAX_ADDRESSES, the least recently seen address is forgotten (a new bucket
starts full, so one whose bucket had refilled loses nothing).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from decisionflow_server.foundation.token_bucket import TokenBucket

MAX_ADDRESSES = 10_000


class SignInBudget:
    """The sign-in bucket of every client address, in this process; per_minute 0 turns it off."""

    def __init__(self, per_minute: int, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._per_minute = per_minute
        self._monotonic = monotonic
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def admit(self, address: str) -> int:
        """Charge address one sign-in and return 0, or charge nothing and return the whole seconds
        until one fits (at least 1)."""
        if self._per_minute <= 0:
            return 0
        # No lock: the console serves on one event loop, and nothing here awaits.
        now = self._monotonic()
        bucket = self._buckets.get(address)
        if bucket is None:
            if len(self._buckets) >= MAX_ADDRESSES:
                self._buckets.popitem(last=False)
            bucket = TokenBucket(self._per_minute / 60.0, self._per_minute, self._per_minute, now)
            self._buckets[address] = bucket
        else:
            self._buckets.move_to_end(address)
            bucket.refill(now)
        wait = bucket.wait_for(1)
        if wait > 0:
            return max(1, math.ceil(wait))
        bucket.tokens -= 1
        return 0
