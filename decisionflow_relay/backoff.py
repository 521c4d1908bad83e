"""Pauses between attempts at something that is down (the broker, the orchestrator's stream)."""

from __future__ import annotations

# From the first pause to the most, doubling.
FIRST_BACKOFF = 0.1
MOST_BACKOFF = 5.0


class Backoff:
    """Pauses that double from FIRST_BACKOFF to MOST_BACKOFF, and back to the first after a success."""

    def __init__(self) -> None:
        self._next = FIRST_BACKOFF

    def pause(self) -> float:
        """The pause before the next attempt."""
        pause, self._next = self._next, min(MOST_BACKOFF, self._next * 2)
        return pause

    def reset(self) -> None:
        """Start again from the first pause."""
        self._next = FIRST_BACKOFF
