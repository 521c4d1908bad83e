"""The reconciler settling a backlog of Unknowns: seeding the backlog, then one timed pass.

Approving operations one by one through a receiver that loses its replies would take minutes for
10,000 operations, so the backlog is seeded through the orchestrator store's own methods (proposal,
approval, one recorded attempt with its payload: the operation UNKNOWN, exactly as the commit step
leaves it after a lost reply), and the matching effects at the receiver through its real Apply RPC
with the same payload bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import _workload
from bench._calls import Clients, applies
from bench._processes import ServerProcess
from decisionflow_server.foundation.processes import child_environment
from orchestrator.store import OrchestratorStore
from tests.support.seeding import seed_decided, seeding_engine

SEED_METHOD = (
    "orchestrator rows (proposal, decision, one attempt with its payload: UNKNOWN) recorded through the "
    "orchestrator store's methods; matching receiver effects written with Apply over gRPC"
)
# Below the servers' limit of 64 concurrent streams per connection, with room for the streams still closing.
SEED_IN_FLIGHT = 32


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    """One reconciler pass over the seeded backlog."""

    backlog: int
    settled: int
    pass_seconds: float
    wall_seconds: float
    seed_seconds: float
    summary: dict[str, object]

    @property
    def settle_rps(self) -> float:
        """Operations settled per second of the pass, as the reconciler timed it."""
        return self.settled / self.pass_seconds if self.pass_seconds > 0 else 0.0


def _seed_orchestrator(database_url: str, seeds: Sequence[tuple[str, datetime]]) -> None:
    engine = seeding_engine(database_url)
    try:
        store = OrchestratorStore(engine)
        for tag, decided_at in seeds:
            proposal = _workload.proposal(tag, decided_at)
            seed_decided(store, proposal, decided_at, reviewer=_workload.REVIEWER, attempted_at=decided_at)
    finally:
        engine.dispose()


async def seed(clients: Clients, orchestrator_url: str, backlog: int, run_tag: str) -> float:
    """Write backlog Unknowns whose effects the receiver holds; return the seconds it took."""
    started = time.perf_counter()
    # Decided over the two minutes before the last minute, a few milliseconds apart as real
    # decisions would be: old enough for any grace period, far younger than the alert threshold.
    start = datetime.now(UTC) - timedelta(minutes=3)
    spacing = timedelta(minutes=2) / max(1, backlog)
    seeds = [(f"{run_tag}-u{i:06d}", start + i * spacing) for i in range(backlog)]
    _seed_orchestrator(orchestrator_url, seeds)
    requests = [_workload.apply_request(tag, decided_at) for tag, decided_at in seeds]
    sample = await applies(clients, requests, SEED_IN_FLIGHT, replay=False)
    if sample.failures:
        raise RuntimeError(f"seeding the receiver failed {sample.failures} times: {sample.first_failure}")
    return time.perf_counter() - started


def run_pass(
    orchestrator: ServerProcess, receiver: ServerProcess, workdir: Path, backlog: int, seed_seconds: float
) -> ReconcileResult:
    """Run ``decisionflow-reconciler --once --json`` once and return what it reports."""
    command = [
        sys.executable,
        "-m",
        "reconciler.main",
        "--once",
        "--json",
        "--orchestrator-target",
        orchestrator.target,
        "--receiver-target",
        receiver.target,
    ]
    env = child_environment()
    started = time.perf_counter()
    with (workdir / "reconciler.stderr").open("ab") as err:
        finished = subprocess.run(command, stdout=subprocess.PIPE, stderr=err, env=env, check=False, timeout=600)
    wall = time.perf_counter() - started
    lines = [line for line in finished.stdout.decode().splitlines() if line.startswith("{")]
    if finished.returncode not in (0, 1) or not lines:
        tail = (workdir / "reconciler.stderr").read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"reconciler exited with {finished.returncode}:\n{tail}")
    summary = json.loads(lines[-1])
    return ReconcileResult(
        backlog=backlog,
        settled=int(summary["settled"]),
        pass_seconds=float(summary["duration_seconds"]),
        wall_seconds=wall,
        seed_seconds=seed_seconds,
        summary=summary,
    )
