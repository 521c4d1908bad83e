"""Server processes for the benchmark, started with the shared launcher as the tests and the demo do."""

from __future__ import annotations

from decisionflow_server.foundation.processes import ServiceProcess, spawn

__all__ = ["CHECKPOINT_KEY", "ServerProcess", "spawn"]

CHECKPOINT_KEY = "bench-checkpoint-key-" + "k" * 32

# The bench's servers are the shared launcher's processes (port, logs, rss_kib, stop).
ServerProcess = ServiceProcess
