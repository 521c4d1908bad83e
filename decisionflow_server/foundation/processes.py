"""Services as real child processes: start with flags and environment, wait for the port, stop, read logs.

A service started here is ``python -m <module> <args> --port-file FILE``: it binds (port 0 picks
a free one), then writes the port to FILE atomically, so FILE existing means the port is bound.
Stopping is SIGTERM (graceful shutdown: health NOT_SERVING, then drain) and SIGKILL for a process
that outlives the timeout. The demo, the benchmark and the tests all start services this way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

# Settings a parent shell may hold; a child gets only those its starter passes on purpose.
SETTINGS_PREFIX = "DECISIONFLOW_"


class ServiceStartError(RuntimeError):
    """A service exited, or did not announce its port, before it was ready."""


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago (nothing listens on it now)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return this process's environment without DECISIONFLOW_ settings, plus extra."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(SETTINGS_PREFIX)}
    env.update(extra or {})
    return env


def log_tail(path: Path, lines: int = 20) -> str:
    """Return the last lines of a log file ('' when it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def write_port_file(port_file: Path, port: int) -> None:
    """Write port to port_file aside and rename it, so a process polling for the file never reads half a number."""
    partial = port_file.with_name(port_file.name + ".partial")
    partial.write_text(f"{port}\n", encoding="ascii")
    partial.replace(port_file)


def wait_for_port_file(port_file: Path, alive: Callable[[], bool], timeout: float, *, poll: float = 0.02) -> int | None:
    """Return the port written to port_file, or None once the process died or timeout passed."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError):
            # A file still being written by a writer that does not rename reads empty: wait for the number.
            return int(port_file.read_text(encoding="ascii"))
        if not alive() or time.monotonic() > deadline:
            return None
        time.sleep(poll)


@dataclass
class ServiceProcess:
    """A service child process, the port it announced (0 until ready) and its log files."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    stderr_path: Path
    port_file: Path | None = None

    @property
    def target(self) -> str:
        """host:port to dial."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    @property
    def stdout_path(self) -> Path:
        """What the process wrote to stdout (next to its log, ending .stdout)."""
        return self.stderr_path.with_suffix(".stdout")

    @property
    def log_path(self) -> Path:
        """The structured log (JSON lines on stderr)."""
        return self.stderr_path

    def stderr(self) -> str:
        """Everything the process wrote to stderr so far."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def log(self) -> str:
        """Everything the service logged so far (its stderr)."""
        return self.stderr()

    def rss_kib(self) -> int:
        """Resident memory of the process (VmRSS from /proc) in KiB; 0 if it has exited."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text(encoding="ascii")
        except OSError:
            return 0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def wait_ready(self, timeout: float = 30) -> int:
        """Wait until the port is announced and return it; raise ServiceStartError (the process killed)."""
        assert self.port_file is not None, f"{self.name} was not launched with a port file"
        port = wait_for_port_file(self.port_file, lambda: self.process.poll() is None, timeout)
        if port is not None:
            self.port = port
            return port
        exited = self.process.poll()
        if exited is None:
            self.kill()
            raise ServiceStartError(f"{self.name} did not announce its port within {timeout:.0f} s")
        raise ServiceStartError(f"{self.name} exited with status {exited} at start:\n{log_tail(self.stderr_path)}")

    def wait_serving(self, timeout: float = 10) -> None:
        """Wait until the health service answers SERVING; raise ServiceStartError otherwise."""
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while True:
                try:
                    answer = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if answer.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise ServiceStartError(f"{self.name} is not SERVING after {timeout:.0f} s")
                time.sleep(0.05)

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM the process (graceful shutdown), SIGKILL it after timeout; return its exit status."""
        return terminate([self.process], timeout)[0]

    def kill(self) -> int:
        """SIGKILL the process and return its exit status."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        return self.process.wait(15)


def launch(
    module: str,
    args: Sequence[str],
    workdir: Path,
    name: str,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    own_session: bool = False,
    log_suffix: str = ".stderr",
    base_env: Mapping[str, str] | None = None,
    announces_port: bool = True,
) -> ServiceProcess:
    """Start ``python -m module args --port-file FILE`` with base_env (default: this process's environment
    without DECISIONFLOW_ settings) plus env (without ``--port-file`` when it announces no port: a job).

    Logs go to workdir/<name>.stdout and <name><log_suffix>; own_session keeps a terminal's Ctrl-C away from
    the child, so its starter decides when it stops. Call wait_ready() before dialling it.
    """
    slug = name.replace(" ", "-")
    port_file = workdir / f"{slug}.port"
    port_file.unlink(missing_ok=True)
    stdout_path, stderr_path = workdir / f"{slug}.stdout", workdir / f"{slug}{log_suffix}"
    with stdout_path.open("ab") as out, stderr_path.open("ab") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", module, *args, *(["--port-file", str(port_file)] if announces_port else [])],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=child_environment(env) if base_env is None else {**base_env, **(env or {})},
            cwd=cwd,
            start_new_session=own_session,
        )
    return ServiceProcess(name, process, 0, stderr_path, port_file)


def spawn(
    module: str,
    args: Sequence[str],
    workdir: Path,
    name: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> ServiceProcess:
    """Start a service (see launch) and wait until it announced its port."""
    service = launch(module, args, workdir, name, env=env)
    service.wait_ready(timeout)
    return service


def terminate(processes: Sequence[subprocess.Popen[bytes]], timeout: float) -> list[int]:
    """SIGTERM every process at once, SIGKILL those alive after timeout; return their exit statuses."""
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
