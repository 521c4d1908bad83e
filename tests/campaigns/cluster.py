"""A receiver, orchestrators and reconcilers as real processes that can be killed and restarted in place.

Each server keeps the port it first bound, so clients and the orchestrators' channel to the
receiver find a restarted process where the old one was.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decisionflow_demo.launch import CHECKPOINT_KEYS_ENV, UNLIMITED_AUTHORS
from tests.campaigns.auditlog import LogAuditor
from tests.campaigns.processes import Child, Launcher
from tests.support.stack import CHECKPOINT_KEY

RECONCILER_TIMEOUT_SECONDS = 60.0


@dataclass
class Server:
    """A service that is (re)started as a child process on a fixed port."""

    launcher: Launcher
    name: str
    module: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    child: Child | None = None
    starts: int = 0
    # Where it listens and where the test dials it; a server in a network namespace listens beyond
    # loopback (with TLS and authentication) and is dialled at its namespace's address.
    netns: str | None = None
    bind_host: str = "127.0.0.1"
    host: str = "127.0.0.1"

    @property
    def target(self) -> str:
        """host:port to dial."""
        return f"{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        """True while the current process runs."""
        return self.child is not None and self.child.alive

    def start(self, *, extra_argv: Sequence[str] = (), env: dict[str, str] | None = None) -> None:
        """Start the process (on the port it had before, if any); it must not be running."""
        assert not self.alive, f"{self.name} is already running"
        self.starts += 1
        child, port = self.launcher.serve(
            f"{self.name}-{self.starts}",
            self.module,
            f"{self.bind_host}:{self.port}",
            [*self.argv, *extra_argv],
            {**self.env, **(env or {})},
            self.netns,
        )
        self.child, self.port = child, port

    def kill(self) -> int | None:
        """SIGKILL the process; return its exit status (None if it was not started)."""
        return None if self.child is None else self.child.kill()

    def ensure(self) -> None:
        """Start the process if it is not running."""
        if not self.alive:
            self.start()


@dataclass(frozen=True)
class ReconcilerRun:
    """One ``decisionflow-reconciler --once --json`` run: its exit status and summary."""

    exitcode: int | None
    summary: dict[str, Any]
    stderr: str

    def describe(self) -> str:
        """The exit status, summary and the end of stderr, for an assertion message."""
        return f"reconciler exit {self.exitcode}: {json.dumps(self.summary)}\n{self.stderr[-2000:]}"


@dataclass
class Cluster:
    """One receiver, any number of orchestrators and an optional reconciler loop, as processes; and the
    auditor of the orchestrators' audit log, on their database."""

    launcher: Launcher
    receiver: Server
    orchestrators: list[Server]
    audit: LogAuditor
    reconciler_runs: int = 0
    loop: Child | None = None
    loop_starts: int = 0
    reconciler_extra_argv: list[str] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        workdir: Path,
        receiver_url: str,
        orchestrator_url: str,
        *,
        orchestrators: int = 1,
        receiver_timeout_seconds: float = 1.0,
        workers: int = 1,
    ) -> Cluster:
        """Declare (not start) the processes of a stack on two databases, each server with workers processes."""
        launcher = Launcher(workdir)
        per_server = ["--workers", str(workers)]
        receiver = Server(launcher, "receiver", "effect_receiver.main", ["--database-url", receiver_url, *per_server])
        cluster = cls(launcher, receiver, [], LogAuditor(orchestrator_url))
        for i in range(orchestrators):
            cluster.orchestrators.append(
                Server(
                    launcher,
                    f"orchestrator{i}",
                    "orchestrator.main",
                    [
                        "--database-url",
                        orchestrator_url,
                        "--receiver-timeout-seconds",
                        str(receiver_timeout_seconds),
                        *per_server,
                        *UNLIMITED_AUTHORS,
                    ],
                    {CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY},
                )
            )
        return cluster

    def start(self) -> None:
        """Start the receiver, then the orchestrators (which dial the receiver's port)."""
        self.receiver.start()
        for server in self.orchestrators:
            server.argv += ["--receiver-target", self.receiver.target]
            server.start()

    def servers(self) -> list[Server]:
        """The receiver and the orchestrators."""
        return [self.receiver, *self.orchestrators]

    def ensure_all(self) -> None:
        """Restart every server that is down."""
        for server in self.servers():
            server.ensure()

    def _reconciler_argv(self, orchestrator: int) -> list[str]:
        return [
            "--orchestrator-target",
            self.orchestrators[orchestrator].target,
            "--receiver-target",
            self.receiver.target,
            "--grace-seconds",
            "0",
            "--timeout-seconds",
            "5",
            *self.reconciler_extra_argv,
        ]

    def reconcile_once(self, orchestrator: int = 0) -> ReconcilerRun:
        """Run one ``--once --json`` pass (alerting on any operation left open) and wait for it."""
        self.reconciler_runs += 1
        child = self.launcher.start(
            f"reconciler-once-{self.reconciler_runs}",
            "reconciler.main",
            ["--once", "--json", "--alert-after-seconds", "0", *self._reconciler_argv(orchestrator)],
        )
        exitcode = child.wait(RECONCILER_TIMEOUT_SECONDS)
        if exitcode is None:
            child.kill()
        lines = child.stdout().strip().splitlines()
        summary = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
        return ReconcilerRun(exitcode, summary, child.stderr())

    def start_loop(self, interval: float, orchestrator: int = 0) -> None:
        """Start a reconciler loop (``--interval``) that settles operations while the campaign runs."""
        assert self.loop is None or not self.loop.alive
        self.loop_starts += 1
        self.loop = self.launcher.start(
            f"reconciler-loop-{self.loop_starts}",
            "reconciler.main",
            ["--interval", str(interval), *self._reconciler_argv(orchestrator)],
        )

    def close(self) -> None:
        """Kill every process."""
        self.launcher.close()
