"""Campaign fixtures: the sizes given on the command line, the history, and process stacks; and what a
failing campaign shows beside its error (``on_failure``)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.campaigns.cluster import Cluster
from tests.campaigns.history import History

DEFAULT_SEED = 20261129
# What a test asked to show when it fails: (heading, how to read it), read once the failure is known.
FAILURE_NOTES = pytest.StashKey[list[tuple[str, Callable[[], str]]]]()
FAILED = pytest.StashKey[bool]()


def on_failure(request: pytest.FixtureRequest, heading: str, note: Callable[[], str]) -> None:
    """Show note() under heading in the report of the test, should its setup or call fail."""
    request.node.stash.setdefault(FAILURE_NOTES, []).append((heading, note))


def failed(request: pytest.FixtureRequest) -> bool:
    """Whether the test's setup or call has failed (for a fixture's teardown to keep what explains it)."""
    return bool(request.node.stash.get(FAILED, False))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.when in ("setup", "call"):
        item.stash[FAILED] = True
        for heading, note in item.stash.get(FAILURE_NOTES, []):
            report.sections.append((heading, note()))
    return report


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
