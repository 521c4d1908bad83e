"""Advance a generator on its own thread, a few items ahead of the consumer.

The pass uses it to list and look up the next batch while the current one is being settled:
the orchestrator, the receiver and the reconciler then work at the same time instead of in
turn. Items come out in order; an exception in the generator is raised in the consumer.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

_POLL_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class _Item(Generic[T]):
    value: T


@dataclass(frozen=True, slots=True)
class _End:
    error: BaseException | None


class Lookahead(Generic[T], Iterator[T]):
    """Iterate a generator that runs up to depth items ahead on a background thread."""

    def __init__(self, source: Generator[T, None, None], depth: int = 2) -> None:
        self._queue: queue.Queue[_Item[T] | _End] = queue.Queue(maxsize=depth)
        self._cancelled = threading.Event()
        self._end: _End | None = None
        self._thread = threading.Thread(target=self._run, args=(source,), name="reconciler-lookahead", daemon=True)
        self._thread.start()

    def _run(self, source: Generator[T, None, None]) -> None:
        try:
            for item in source:
                if not self._put(_Item(item)):
                    return
        except BaseException as exc:  # handed to the consumer, which re-raises it
            self._put(_End(exc))
            return
        finally:
            source.close()
        self._put(_End(None))

    def _put(self, entry: _Item[T] | _End) -> bool:
        # A consumer that stopped early never takes more items; give up once it cancelled.
        while not self._cancelled.is_set():
            try:
                self._queue.put(entry, timeout=_POLL_SECONDS)
            except queue.Full:
                continue
            return True
        return False

    def __next__(self) -> T:
        """Return the next item, raise what the generator raised, or stop when it is exhausted."""
        if self._end is None:
            entry = self._queue.get()
            if isinstance(entry, _Item):
                return entry.value
            self._end = entry
        if self._end.error is not None:
            raise self._end.error
        raise StopIteration

    def close(self) -> None:
        """Stop the background thread after its current step and wait for it."""
        self._cancelled.set()
        self._thread.join()
