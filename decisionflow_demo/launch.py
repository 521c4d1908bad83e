"""A receiver and an orchestrator as child processes, wired together: the command lines and the start order.

The demo, the benchmark and the tests start the same two services; each side takes the same kinds
of overrides (database URL, failpoints, extra flags, environment), so a test can fault the receiver
as easily as the orchestrator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from decisionflow_server.foundation.processes import ServiceProcess, spawn
from orchestrator.config import CHECKPOINT_KEYS

CHECKPOINT_KEYS_ENV = CHECKPOINT_KEYS.env  # in the environment, never on a command line where ps shows it
RECEIVER_MODULE = "effect_receiver.main"
ORCHESTRATOR_MODULE = "orchestrator.main"
RECONCILER_MODULE = "reconciler.main"
# The orchestrator's flags that turn every per-author budget off (orchestrator.quotas), for the benchmark
# and the fault campaigns: they send everything as one principal, at volumes no single author sends.
UNLIMITED_AUTHORS = (
    "--author-calls-per-second",
    "0",
    "--author-content-bytes-per-minute",
    "0",
    "--author-open-reviews",
    "0",
)


def receiver_args(
    database_url: str, *, address: str = "127.0.0.1:0", failpoints: str = "", extra: Sequence[str] = ()
) -> list[str]:
    """The receiver's command-line flags for a database, an address and failpoints (empty: none)."""
    args = ["--address", address, "--database-url", database_url]
    if failpoints:
        args += ["--failpoints", failpoints]
    return [*args, *extra]


def orchestrator_args(
    database_url: str,
    receiver_target: str,
    *,
    address: str = "127.0.0.1:0",
    failpoints: str = "",
    extra: Sequence[str] = (),
) -> list[str]:
    """The orchestrator's command-line flags for a database, the receiver it calls and failpoints."""
    args = ["--address", address, "--database-url", database_url, "--receiver-target", receiver_target]
    if failpoints:
        args += ["--failpoints", failpoints]
    return [*args, *extra]


@dataclass
class ProcessStack:
    """A receiver and orchestrators as processes in workdir; close() stops every one still running."""

    workdir: Path
    receiver_url: str
    orchestrator_url: str
    checkpoint_keys: str
    receiver: ServiceProcess | None = None
    orchestrators: list[ServiceProcess] = field(default_factory=list)

    def start_receiver(
        self,
        name: str = "receiver",
        *,
        database_url: str | None = None,
        failpoints: str = "",
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> ServiceProcess:
        """Start a receiver (the stack's database unless database_url) and make it the one orchestrators dial."""
        argv = receiver_args(database_url or self.receiver_url, failpoints=failpoints, extra=args)
        self.receiver = spawn(RECEIVER_MODULE, argv, self.workdir, name, env=env)
        return self.receiver

    def start_orchestrator(
        self,
        name: str = "orchestrator",
        *,
        database_url: str | None = None,
        failpoints: str = "",
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> ServiceProcess:
        """Start an orchestrator that calls the current receiver, with the stack's checkpoint keys."""
        assert self.receiver is not None, "start the receiver first"
        argv = orchestrator_args(
            database_url or self.orchestrator_url, self.receiver.target, failpoints=failpoints, extra=args
        )
        child_env = {CHECKPOINT_KEYS_ENV: self.checkpoint_keys, **(env or {})}
        orchestrator = spawn(ORCHESTRATOR_MODULE, argv, self.workdir, name, env=child_env)
        self.orchestrators.append(orchestrator)
        return orchestrator

    def close(self) -> None:
        """Stop the orchestrators, then the receiver (SIGTERM, then SIGKILL)."""
        for service in [*reversed(self.orchestrators), *([self.receiver] if self.receiver else [])]:
            service.stop()
