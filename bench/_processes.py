"""Server processes for the benchmark: spawned as ``python -m module ... --port-file``, like the tests do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_KEY = "bench-checkpoint-key-" + "k" * 32


@dataclass
class ServerProcess:
    """A server child process and the port it announced."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    stderr_path: Path

    @property
    def target(self) -> str:
        """host:port to dial."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

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

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM the process (graceful shutdown), SIGKILL it if it lingers; return its exit status."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout)


def spawn(
    module: str,
    args: Sequence[str],
    workdir: Path,
    name: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> ServerProcess:
    """Start ``python -m module args --port-file FILE`` and wait until the port file appears."""
    port_file = workdir / f"{name}.port"
    port_file.unlink(missing_ok=True)
    stderr_path = workdir / f"{name}.stderr"
    # The bench configures its servers explicitly; settings inherited from the shell would skew it.
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    child_env.update(env or {})
    with (workdir / f"{name}.stdout").open("ab") as out, stderr_path.open("ab") as err:
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
            tail = stderr_path.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise RuntimeError(f"{name} did not start:\n{tail}")
        time.sleep(0.05)
    return ServerProcess(name, process, int(port_file.read_text(encoding="ascii")), stderr_path)


def spawn_receiver(workdir: Path, database_url: str, *, name: str = "receiver", failpoints: str = "") -> ServerProcess:
    """Start an EffectReceiver process on a free loopback port."""
    args = ["--address", "127.0.0.1:0", "--database-url", database_url]
    if failpoints:
        args += ["--failpoints", failpoints]
    return spawn("effect_receiver.main", args, workdir, name)


def spawn_orchestrator(
    workdir: Path, database_url: str, receiver: ServerProcess, *, name: str = "orchestrator"
) -> ServerProcess:
    """Start an orchestrator process that calls receiver."""
    return spawn(
        "orchestrator.main",
        ["--address", "127.0.0.1:0", "--database-url", database_url, "--receiver-target", receiver.target],
        workdir,
        name,
        env={"DECISIONFLOW_CHECKPOINT_KEYS": CHECKPOINT_KEY},
    )
