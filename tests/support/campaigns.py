"""Campaign fixtures: the sizes given on the command line, the history, and process stacks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.campaigns.cluster import Cluster
from tests.campaigns.history import History

DEFAULT_SEED = 20261129


@dataclass(frozen=True)
class CampaignOptions:
    """The campaign sizes and the seed (``--seed`` replays one failure; otherwise the fixed default)."""

    schedules: int
    operations: int
    crash_repetitions: int
    race_reviews: int
    partition_ops: int
    disk_ops: int
    seed: int | None

    @property
    def base_seed(self) -> int:
        """The seed a campaign derives its draws from."""
        return DEFAULT_SEED if self.seed is None else self.seed


@pytest.fixture
def campaign(request: pytest.FixtureRequest) -> CampaignOptions:
    """The campaign sizes from --schedules, --campaign-ops, --crash-repetitions, --race-reviews,
    --partition-ops, --disk-ops and --seed."""
    get = request.config.getoption
    options = CampaignOptions(
        schedules=int(get("--schedules")),
        operations=int(get("--campaign-ops")),
        crash_repetitions=int(get("--crash-repetitions")),
        race_reviews=int(get("--race-reviews")),
        partition_ops=int(get("--partition-ops")),
        disk_ops=int(get("--disk-ops")),
        seed=get("--seed"),
    )
    for name in ("schedules", "operations", "crash_repetitions", "race_reviews", "partition_ops", "disk_ops"):
        if getattr(options, name) < 1:
            raise pytest.UsageError(f"campaign size {name} must be at least 1")
    return options


@pytest.fixture
def history(tmp_path: Path) -> Iterator[History]:
    """The test's JSONL history of client calls (tmp_path/history.jsonl)."""
    recorded = History(tmp_path / "history.jsonl")
    yield recorded
    recorded.close()


@pytest.fixture
def make_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Cluster]]:
    """Build process stacks in tmp_path (receiver on SQLite; orchestrators on SQLite or the URL given), each
    server with --campaign-workers worker processes."""
    clusters: list[Cluster] = []
    workers = int(request.config.getoption("--campaign-workers"))
    if workers < 1:
        raise pytest.UsageError("--campaign-workers must be at least 1")

    def make(
        orchestrator_url: str | None = None, *, orchestrators: int = 1, receiver_timeout_seconds: float = 1.0
    ) -> Cluster:
        workdir = tmp_path / f"cluster{len(clusters)}"
        workdir.mkdir()
        cluster = Cluster.create(
            workdir,
            f"sqlite:///{workdir / 'receiver.db'}",
            orchestrator_url or f"sqlite:///{workdir / 'orchestrator.db'}",
            orchestrators=orchestrators,
            receiver_timeout_seconds=receiver_timeout_seconds,
            workers=workers,
        )
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.close()
