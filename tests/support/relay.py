"""decisionflow-relay as a real process for the tests, its metrics, and the orchestrator's audit log as the
truth to compare a stream with (read from its database: every sequenced leaf, in index order)."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from decisionflow_server.foundation.processes import ServiceProcess, free_port, launch, log_tail
from decisionflow_server.storage import db

RELAY_MODULE = "decisionflow_relay.main"


@dataclass
class RelayProcess:
    """A relay process and the port of its metrics."""

    service: ServiceProcess
    metrics_port: int

    def metrics(self) -> dict[str, float]:
        """The relay's own samples (decisionflow_relay_*) from its metrics endpoint, by name."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as answer:
            text = answer.read().decode("utf-8")
        samples: dict[str, float] = {}
        for line in text.splitlines():
            found = re.match(r"(decisionflow_relay_[a-z_]+) ([0-9.e+-]+)$", line)
            if found:
                samples[found[1]] = float(found[2])
        return samples

    def alive(self) -> bool:
        """Whether the process is running."""
        return self.service.process.poll() is None


def spawn_relay(
    workdir: Path,
    orchestrator_target: str,
    nats_servers: str,
    cursor_file: Path,
    *,
    name: str = "relay",
    token_file: Path | None = None,
    extra: Sequence[str] = (),
) -> RelayProcess:
    """Start ``python -m decisionflow_relay.main`` against the orchestrator and NATS, with its metrics on a free
    port; returns once the metrics endpoint answers (the relay connected and made sure of its stream)."""
    port = free_port()
    args = [
        "--orchestrator-target",
        orchestrator_target,
        "--nats-url",
        nats_servers,
        "--cursor-file",
        str(cursor_file),
        "--metrics-port",
        str(port),
        *(["--token-file", str(token_file)] if token_file is not None else []),
        *extra,
    ]
    service = launch(RELAY_MODULE, args, workdir, name, announces_port=False)
    relay = RelayProcess(service, port)
    deadline = time.monotonic() + 60
    while True:
        assert relay.alive(), f"{name} exited with {service.process.poll()}:\n{log_tail(service.log_path)}"
        try:
            relay.metrics()
            return relay
        except OSError:
            assert time.monotonic() < deadline, f"{name} serves no metrics:\n{log_tail(service.log_path)}"
            time.sleep(0.1)


def read_cursor(cursor_file: Path) -> int:
    """The cursor stored (0 when there is no file)."""
    try:
        return int(cursor_file.read_text(encoding="ascii"))
    except FileNotFoundError:
        return 0


@dataclass(frozen=True)
class Leaf:
    """One sequenced leaf of the orchestrator's audit log."""

    index: int
    leaf: bytes
    kind: str
    case_id: str
    operation_id: str


def audit_leaves(database_url: str) -> tuple[list[Leaf], int]:
    """The orchestrator's sequenced leaves in index order, and how many entries wait to be sequenced."""
    engine = db.create_engine(database_url, pool_size=1)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT leaf_index, leaf, kind, case_id, operation_id FROM audit_entries "
                    "WHERE leaf_index IS NOT NULL ORDER BY leaf_index"
                )
            ).all()
            waiting = conn.execute(sa.text("SELECT count(*) FROM audit_entries WHERE leaf_index IS NULL")).scalar_one()
    finally:
        engine.dispose()
    return [Leaf(int(r[0]), bytes(r[1]), str(r[2]), str(r[3]), str(r[4])) for r in rows], int(waiting)


def wait_for_cursor(cursor_file: Path, database_url: str, relay: RelayProcess, timeout: float = 120) -> list[Leaf]:
    """Wait until nothing waits to be sequenced and the stored cursor reaches the log's size; return the leaves."""
    deadline = time.monotonic() + timeout
    while True:
        leaves, waiting = audit_leaves(database_url)
        if not waiting and leaves and read_cursor(cursor_file) == len(leaves):
            return leaves
        assert relay.alive(), log_tail(relay.service.log_path, 40)
        assert time.monotonic() < deadline, (
            f"cursor {read_cursor(cursor_file)} of {len(leaves)} leaves ({waiting} waiting) after {timeout:.0f} s:\n"
            + log_tail(relay.service.log_path, 40)
        )
        time.sleep(0.2)
