"""The demo's child processes: services that announce a port, and commands that run to completion.

Children start in their own session, so a Ctrl-C in the terminal reaches only the demo, which then
stops them in order: SIGTERM (graceful shutdown), then SIGKILL for any that outlive the timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decisionflow_server.foundation.processes import (
    ServiceProcess,
    ServiceStartError,
    child_environment,
    free_port,
    launch,
    terminate,
)

__all__ = ["Children", "DemoError", "Finished", "Service", "child_environment", "free_port"]


class DemoError(Exception):
    """The demo could not run as described; exit_code 2 for bad usage, 1 otherwise."""

    def __init__(self, reason: str, exit_code: int = 1) -> None:
        super().__init__(reason)
        self.exit_code = exit_code


# A running service process of the demo: the shared launcher's type.
Service = ServiceProcess


@dataclass(frozen=True)
class Finished:
    """A command that ran to completion: its exit status, output, and its last stdout line as JSON."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str

    @property
    def document(self) -> dict[str, Any]:
        """The last stdout line parsed as a JSON object ({} when there is none)."""
        lines = self.stdout.strip().splitlines()
        if not lines:
            return {}
        try:
            parsed = json.loads(lines[-1])
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}

    @property
    def message(self) -> str:
        """The command's last stderr line (its human summary)."""
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else ""


@dataclass
class Children:
    """Every child process the demo started; close() stops those still running."""

    logs: Path
    env: Mapping[str, str]
    cwd: Path
    stop_timeout: float = 10.0
    start_timeout: float = 30.0
    services: list[Service] = field(default_factory=list)

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        return {**self.env, **(extra or {})}

    def launch(
        self,
        name: str,
        module: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        announces_port: bool = True,
    ) -> Service:
        """Start ``python -m module args --port-file F``; wait_ready() then waits for its port (a job that
        announces none, such as the reconciler's loop, is started without the flag and not waited for)."""
        service = launch(
            module,
            args,
            self.logs,
            name,
            env=env,
            announces_port=announces_port,
            base_env=self.env,
            cwd=self.cwd,
            own_session=True,
            log_suffix=".log",
        )
        self.services.append(service)
        return service

    def wait_ready(self, *services: Service) -> None:
        """Wait until every service has written its port; stop one that exits or takes too long."""
        deadline = time.monotonic() + self.start_timeout
        for service in services:
            try:
                service.wait_ready(max(0.0, deadline - time.monotonic()))
            except ServiceStartError as exc:
                self.stop(service)
                raise DemoError(str(exc)) from None

    def stop(self, service: Service) -> int:
        """SIGTERM service, SIGKILL it after stop_timeout, and return its exit status."""
        if service in self.services:
            self.services.remove(service)
        return terminate([service.process], self.stop_timeout)[0]

    def run(
        self, module: str, args: Sequence[str], *, timeout: float = 60, env: Mapping[str, str] | None = None
    ) -> Finished:
        """Run ``python -m module args`` to completion and return its status and output."""
        argv = (sys.executable, "-m", module, *args)
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                env=self._env(env),
                cwd=self.cwd,
                timeout=timeout,
                check=False,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired as exc:  # run() has killed it already
            raise DemoError(f"{module} {' '.join(args[:1])} did not finish within {timeout:.0f} s") from exc
        return Finished(
            argv,
            done.returncode,
            done.stdout.decode("utf-8", errors="replace"),
            done.stderr.decode("utf-8", errors="replace"),
        )

    def close(self) -> None:
        """Stop every service still running (all SIGTERMed at once, then SIGKILL after stop_timeout)."""
        processes = [service.process for service in self.services]
        self.services.clear()
        terminate(processes, self.stop_timeout)
