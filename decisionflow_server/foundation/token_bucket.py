"""A token bucket: the budget the orchestrator's per-author quotas and the console's per-address
sign-in budget are made of. It starts full and refills continuously up to its size; time is whatever
clock its owner reads (a monotonic one, injected so tests move it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TokenBucket:
    """A bucket of size tokens refilled at rate per second; tokens are what it holds at updated."""

    rate: float
    size: float
    tokens: float
    updated: float

    def refill(self, now: float) -> None:
        """Add what the time since the last refill earned, up to the bucket's size."""
        if now > self.updated:
            self.tokens = min(self.size, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def wait_for(self, cost: float) -> float:
        """Return the seconds until cost tokens are in the bucket (0: they are now)."""
        return 0.0 if self.tokens >= cost else (cost - self.tokens) / self.rate

    @property
    def full(self) -> bool:
        """True when the bucket holds all it can: dropping it loses nothing."""
        return self.tokens >= self.size
