"""Shared fixtures come from plugin modules in tests/support (listed below), not from conftests
imported as libraries.

The fault campaigns' options (and the outages tests/recovery runs) live here because pytest reads
``pytest_addoption`` only from the root conftest; ``tests/campaigns`` and ``tests/recovery`` read them.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

# A property holds or not whatever the machine's speed: no example is failed for taking long (hypothesis's
# default deadline is 200 ms, which a loaded 2-core machine passes now and then).
settings.register_profile("decisionflow", deadline=None)
settings.load_profile("decisionflow")

pytest_plugins = [
    "tests.support.databases",
    "tests.support.stack",
    "tests.support.receiver",
    "tests.support.secure",
    "tests.support.oidc",
    "tests.support.hostile",
    "tests.support.review_cli",
    "tests.support.campaigns",
    "tests.support.client_examples",
    "tests.support.typescript",
    "tests.support.kubernetes",
    "tests.support.console",
    "tests.support.audit",
    "tests.support.containers",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    """The fault campaigns' sizes (CI runs the defaults) and the seed that replays one failure."""
    group = parser.getgroup("campaigns", "fault campaigns (tests/campaigns)")
    group.addoption("--schedules", type=int, default=50, help="seeded random kill schedules to run (default 50)")
    group.addoption(
        "--campaign-ops", type=int, default=1000, help="operations in the lost-reply campaign (default 1000)"
    )
    group.addoption("--crash-repetitions", type=int, default=3, help="repetitions of each crash point (default 3)")
    group.addoption("--race-reviews", type=int, default=200, help="reviews raced by 8 approvers (default 200)")
    group.addoption(
        "--partition-ops", type=int, default=24, help="approvals per network partition scenario (default 24)"
    )
    group.addoption("--disk-ops", type=int, default=24, help="operations per full-disk phase (default 24)")
    group.addoption(
        "--planted-bugs",
        action="store_true",
        default=False,
        help="run the partition and full-disk scenarios against copies with one guard removed (about 70 s)",
    )
    group.addoption(
        "--soak-seconds", type=float, default=30, help="length of the soak's mixed traffic in seconds (default 30)"
    )
    group.addoption(
        "--starvation-seconds",
        type=float,
        default=20,
        help="length of the connection-starvation attack in tests/hostile (default 20; past 30 refusals expire)",
    )
    group.addoption(
        "--failover-rounds",
        type=int,
        default=1,
        help="rounds of leader loss, switchover and standby loss in the database failover campaign (default 1)",
    )
    group.addoption(
        "--failover-faults",
        default="leader_lost,leader_partitioned,switchover,standby_lost",
        help="the database failover campaign's faults in each round, comma-separated (default: all four)",
    )
    group.addoption(
        "--failover-async",
        action="store_true",
        default=False,
        help="run the database failover campaign on asynchronous replication (reported, not asserted)",
    )
    group.addoption(
        "--relay-seconds",
        type=float,
        default=60,
        help="length of the relay campaign's workload and faults in seconds (default 60)",
    )
    group.addoption("--seed", type=int, default=None, help="replay one campaign seed (printed by a failing campaign)")
    group.addoption(
        "--campaign-workers",
        type=int,
        default=1,
        help="worker processes (--workers) of each receiver and orchestrator of the process clusters (default 1)",
    )
    group.addoption(
        "--outage-seconds",
        default="30",
        help="receiver outages to recover from in tests/recovery, comma-separated (default 30; e.g. 10,30,60)",
    )
    group.addoption(
        "--store-model-examples",
        type=int,
        default=20,
        help="random sequences run against each store's model, per database (tests/stores; default 20)",
    )
    group.addoption(
        "--model-depth",
        choices=("ci", "deep"),
        default="ci",
        help="bounds of the spin model check in tests/model (default ci; deep runs larger bounds)",
    )
