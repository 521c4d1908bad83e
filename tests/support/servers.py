"""Running real servers for tests: in process on a private event-loop thread, or as child processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

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


@dataclass
class ServiceProcess:
    """A service child process, the port it announced, and its log files."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    stderr_path: Path

    @property
    def target(self) -> str:
        """host:port to dial."""
        return f"127.0.0.1:{self.port}"

    def stderr(self) -> str:
        """Everything the process wrote to stderr so far."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM the process (graceful shutdown) and return its exit status."""
        if self.process.poll() is None:
            self.process.terminate()
        return self.process.wait(timeout)

    def kill(self) -> int:
        """SIGKILL the process and return its exit status."""
        if self.process.poll() is None:
            self.process.kill()
        return self.process.wait(15)


def spawn(
    module: str,
    args: Sequence[str],
    workdir: Path,
    name: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 30,
) -> ServiceProcess:
    """Start ``python -m module args --port-file ...`` and wait until it announced its port."""
    port_file = workdir / f"{name}.port"
    port_file.unlink(missing_ok=True)
    stdout_path, stderr_path = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    child_env.update(env or {})
    with stdout_path.open("ab") as out, stderr_path.open("ab") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", module, *args, "--port-file", str(port_file)],
            stdout=out,
            stderr=err,
            env=child_env,
        )
    deadline = time.monotonic() + timeout
    while not port_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
            process.wait()
            raise AssertionError(f"{name} did not start:\n{stderr_path.read_text()}")
        time.sleep(0.05)
    return ServiceProcess(name, process, int(port_file.read_text()), stderr_path)
