"""Real service processes for the campaigns, started from a pre-imported fork server.

A fresh interpreter needs 1 to 2 s to import the orchestrator (the workflow framework is heavy);
the campaigns restart processes hundreds of times. So children are forked by a multiprocessing
fork server that imported the three services once and never touched gRPC: each child is a
separate OS process with its own memory, sockets and database connections, runs the service's
own ``main(argv)`` with its own environment, and dies for real when SIGKILLed. Nothing is shared
with the test process or with the other children.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

from decisionflow_server.foundation.processes import SETTINGS_PREFIX, wait_for_port_file
from tests.campaigns.netns import enter

PRELOAD = ("effect_receiver.main", "orchestrator.main", "reconciler.main")
START_TIMEOUT_SECONDS = 30.0
# A port freed by a SIGKILLed server can take a moment to be bindable again.
BIND_ATTEMPTS = 5

_context: ForkServerContext | None = None


def _fork_server() -> ForkServerContext:
    global _context  # noqa: PLW0603 (one fork server per test process, started on first use)
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOAD))
        _context = context
    return _context


def run_child(
    module: str, argv: Sequence[str], env: Mapping[str, str], stdout: str, stderr: str, netns: str | None = None
) -> None:
    """Entry point in the forked child: enter netns (if named), redirect output, set the environment,
    run the module's main."""
    if netns is not None:
        enter(netns)
    for fd, path in ((1, stdout), (2, stderr)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(target, fd)
        os.close(target)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for key in [k for k in os.environ if k.startswith(SETTINGS_PREFIX)]:
        del os.environ[key]
    os.environ.update(env)
    main: Any = importlib.import_module(module).main
    sys.exit(main(list(argv)))


@dataclass
class Child:
    """One started child process and its log files."""

    name: str
    process: multiprocessing.process.BaseProcess
    stdout_path: Path
    stderr_path: Path

    @property
    def pid(self) -> int:
        """The child's process id."""
        assert self.process.pid is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.process.is_alive()

    @property
    def exitcode(self) -> int | None:
        """The exit status (negative: killed by that signal), None while running."""
        return self.process.exitcode

    def kill(self) -> int | None:
        """SIGKILL the process and return its exit status."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(15)
        return self.process.exitcode

    def terminate(self, timeout: float = 15) -> int | None:
        """SIGTERM the process (graceful shutdown) and return its exit status."""
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(timeout)
        if self.process.is_alive():
            return self.kill()
        return self.process.exitcode

    def wait(self, timeout: float) -> int | None:
        """Wait for the process to end and return its exit status (None if still running)."""
        self.process.join(timeout)
        return self.process.exitcode

    def stdout(self) -> str:
        """Everything the process wrote to stdout so far."""
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        """Everything the process wrote to stderr so far."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")


@dataclass
class Launcher:
    """Starts children in workdir; every child it started is killed by close()."""

    workdir: Path
    children: list[Child] = field(default_factory=list)

    def start(
        self,
        name: str,
        module: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        netns: str | None = None,
    ) -> Child:
        """Fork a child running module's main(argv) with env (DECISIONFLOW_* variables come only from env),
        inside the named network namespace if netns is given."""
        stdout, stderr = self.workdir / f"{name}.stdout", self.workdir / f"{name}.stderr"
        process = _fork_server().Process(
            target=run_child, args=(module, list(argv), dict(env or {}), str(stdout), str(stderr), netns), name=name
        )
        process.start()
        child = Child(name, process, stdout, stderr)
        self.children.append(child)
        return child

    def serve(
        self,
        name: str,
        module: str,
        address: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        netns: str | None = None,
    ) -> tuple[Child, int]:
        """Start a server child on address and wait until it announced its port; return it and the port."""
        port_file = self.workdir / f"{name}.port"
        for attempt in range(1, BIND_ATTEMPTS + 1):
            port_file.unlink(missing_ok=True)
            child = self.start(name, module, ["--address", address, *argv, "--port-file", str(port_file)], env, netns)
            port = wait_for_port_file(port_file, child.process.is_alive, START_TIMEOUT_SECONDS, poll=0.01)
            if port is not None:
                return child, port
            child.kill()
            if attempt == BIND_ATTEMPTS or "bind" not in child.stderr().lower():
                raise AssertionError(f"{name} did not start (exit {child.exitcode}):\n{child.stderr()[-4000:]}")
            time.sleep(0.2 * attempt)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Kill every child still running."""
        for child in self.children:
            child.kill()
