"""Running real servers for tests: in process on a private event-loop thread, or as child processes
(the shared launcher, re-exported here)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from decisionflow_server.foundation.processes import ServiceProcess, free_port, spawn

__all__ = ["LoopThread", "ServiceProcess", "free_port", "spawn"]

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop on a daemon thread; run() executes a coroutine there and waits."""

    def __init__(self, name: str = "server-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run coroutine on the loop thread and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def close(self) -> None:
        """Stop the loop and join its thread."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
