"""Server processes for the benchmark, started with the shared launcher as the tests and the demo do."""

from __future__ import annotations

from pathlib import Path

from decisionflow.processes import ServiceProcess, spawn
from decisionflow.stack import CHECKPOINT_KEYS_ENV, orchestrator_args, receiver_args

__all__ = ["CHECKPOINT_KEY", "ServerProcess", "spawn", "spawn_orchestrator", "spawn_receiver"]

CHECKPOINT_KEY = "bench-checkpoint-key-" + "k" * 32

# The bench's servers are the shared launcher's processes (port, logs, rss_kib, stop).
ServerProcess = ServiceProcess


def spawn_receiver(workdir: Path, database_url: str, *, name: str = "receiver", failpoints: str = "") -> ServerProcess:
    """Start an EffectReceiver process on a free loopback port."""
    return spawn("effect_receiver.main", receiver_args(database_url, failpoints=failpoints), workdir, name)


def spawn_orchestrator(
    workdir: Path, database_url: str, receiver: ServerProcess, *, name: str = "orchestrator"
) -> ServerProcess:
    """Start an orchestrator process that calls receiver."""
    return spawn(
        "orchestrator.main",
        orchestrator_args(database_url, receiver.target),
        workdir,
        name,
        env={CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY},
    )
