"""Ten thousand Unknowns settle in one pass of the command, against receiver and orchestrator
processes on SQLite.

Seeded (see tests/support/seeding.py): the 10,000 decided, attempted operations in the
orchestrator's database and their effects in the receiver's, as lost replies would leave them.
Real: both servers as processes, and the decisionflow-reconciler command over gRPC. The rate
is printed (pytest -s shows it); only outcomes are asserted, since the machine may be shared.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.reconciling import count, run_reconciler
from tests.support.seeding import seed_effects, seed_operations
from tests.support.stack import spawn_orchestrator, spawn_receiver

OPERATIONS = 10_000


@pytest.mark.slow
def test_ten_thousand_unknowns_settle_in_one_pass(tmp_path: Path) -> None:
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    orchestrator_url = f"sqlite:///{tmp_path / 'orchestrator.db'}"
    seed_effects(receiver_url, seed_operations(orchestrator_url, OPERATIONS))
    receiver = spawn_receiver(tmp_path, receiver_url)
    orchestrator = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "orchestrator")
    try:
        began = time.monotonic()
        run = run_reconciler(
            ["--once", "--json", "--orchestrator-target", orchestrator.target, "--receiver-target", receiver.target]
        )
        wall = time.monotonic() - began
    finally:
        orchestrator.stop()
        receiver.stop()
    assert run.returncode == 0, run.stderr
    summary = run.summary
    assert (summary["examined"], summary["settled"], summary["still_unknown"]) == (OPERATIONS, OPERATIONS, 0)
    assert summary["lookup_failures"] == summary["redriven"] == 0
    assert count(orchestrator_url, "SELECT count(*) FROM operations WHERE state = 'committed'") == OPERATIONS
    assert count(receiver_url, "SELECT count(*) FROM effects") == OPERATIONS
    # Progress lines on stderr: the backlog is larger than 2,000.
    assert run.stderr.count("reconciler: examined") == OPERATIONS // 2000
    progress = [json.loads(line) for line in run.stderr.splitlines() if "reconciler: examined" in line]
    assert {(line["level"], line["logger"]) for line in progress} == {("info", "decisionflow.reconciler")}
    rate = summary["settled"] / summary["duration_seconds"]
    print(
        f"\nsettled {summary['settled']} Unknowns in {summary['duration_seconds']:.2f} s "
        f"({rate:.0f} ops/s in the pass; command wall time {wall:.2f} s, SQLite, batch 500)"
    )
