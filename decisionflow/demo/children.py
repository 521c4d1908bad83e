"""The demo's child processes: services that announce a port, and commands that run to completion.

Children start in their own session, so a Ctrl-C in the terminal reaches only the demo, which then
stops them in order: SIGTERM (graceful shutdown), then SIGKILL for any that outlive the timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class DemoError(Exception):
    """The demo could not run as described; exit_code 2 for bad usage, 1 otherwise."""

    def __init__(self, reason: str, exit_code: int = 1) -> None:
        super().__init__(reason)
        self.exit_code = exit_code


@dataclass
class Service:
    """A running service process, the port it announced and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def target(self) -> str:
        """host:port to dial."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def log(self) -> str:
        """Everything the service logged so far (JSON lines on stderr)."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")


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


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


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

    def launch(self, name: str, module: str, args: Sequence[str], *, env: Mapping[str, str] | None = None) -> Service:
        """Start ``python -m module args --port-file F``; wait_ready() then waits for its port."""
        slug = name.replace(" ", "-")
        port_file = self.logs / f"{slug}.port"
        port_file.unlink(missing_ok=True)
        log_path = self.logs / f"{slug}.log"
        with (self.logs / f"{slug}.stdout").open("ab") as out, log_path.open("ab") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", module, *args, "--port-file", str(port_file)],
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=self._env(env),
                cwd=self.cwd,
                start_new_session=True,
            )
        service = Service(name, process, 0, log_path)
        self.services.append(service)
        return service

    def wait_ready(self, *services: Service) -> None:
        """Wait until every service has written its port; stop one that exits or takes too long."""
        deadline = time.monotonic() + self.start_timeout
        for service in services:
            port_file = self.logs / f"{service.name.replace(' ', '-')}.port"
            while not port_file.exists():
                if service.process.poll() is not None:
                    self.stop(service)
                    raise DemoError(
                        f"{service.name} exited with status {service.process.returncode} at start:\n"
                        f"{_tail(service.log_path)}"
                    )
                if time.monotonic() > deadline:
                    self.stop(service)
                    raise DemoError(f"{service.name} did not announce its port within {self.start_timeout:.0f} s")
                time.sleep(0.02)
            service.port = int(port_file.read_text(encoding="ascii"))

    def stop(self, service: Service) -> int:
        """SIGTERM service, SIGKILL it after stop_timeout, and return its exit status."""
        if service in self.services:
            self.services.remove(service)
        return _terminate([service.process], self.stop_timeout)[0]

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
        _terminate(processes, self.stop_timeout)


def _terminate(processes: Sequence[subprocess.Popen[bytes]], timeout: float) -> list[int]:
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    statuses: list[int] = []
    for process in processes:
        try:
            statuses.append(process.wait(max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            statuses.append(process.wait())
    return statuses


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return this process's environment without DECISIONFLOW_ settings (the demo sets its own), plus extra."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DECISIONFLOW_")}
    env.update(extra or {})
    return env
