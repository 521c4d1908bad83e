"""The reconciler loop's health and failure gauges: with the orchestrator unreachable, or the receiver
down so that every lookup fails, its failed passes are counted, /healthz turns 503 after
--unhealthy-after-failed-passes of them (and ``decisionflow health --http`` exits 1), and one good
pass brings both back; the gauges of the last completed pass are kept through failures, so
"orchestrator down" never reads as "nothing Unknown"; lookup failures and escalations are counted."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from decisionflow.v1 import common_pb2
from decisionflow_server.foundation.processes import child_environment, free_port
from reconciler.domain import PassSummary, RedriveCounts
from reconciler.metrics import ReconcilerMetrics
from tests.metrics.scrape import health_status, scrape, wait_until
from tests.support.reconciling import LOST_REPLY, ROOT, approve_unknown, closed_port, operation, reconciler_command
from tests.support.stack import Stack

HEALTH = str(Path(sys.executable).with_name("decisionflow"))


def _summary(
    still_unknown: int,
    oldest: float | None,
    *,
    completed: bool = True,
    lookup_failures: int = 0,
    escalated: int = 0,
) -> PassSummary:
    return PassSummary(
        examined=still_unknown,
        settled=0,
        already_settled=0,
        redriven=RedriveCounts(),
        noted=still_unknown - escalated,
        escalated=escalated,
        lookup_failures=lookup_failures,
        still_unknown=still_unknown,
        oldest_unknown_age_seconds=oldest,
        unknown_older_than_alert=0,
        alert_after_seconds=300.0,
        duration_seconds=0.1,
        completed=completed,
    )


def test_failed_passes_keep_the_last_completed_gauges_and_turn_health_off_after_the_threshold() -> None:
    metrics = ReconcilerMetrics(unhealthy_after_failed_passes=2, wall_clock=lambda: 1_700_000_000.0)
    value = metrics.registry.get_sample_value
    metrics.record(_summary(2, 90.0))
    assert (value("decisionflow_reconciler_last_success_timestamp_seconds"), metrics.healthy()) == (1.7e9, True)
    metrics.pass_failed()
    assert metrics.healthy()
    metrics.pass_failed()
    assert not metrics.healthy()
    assert value("decisionflow_reconciler_consecutive_failed_passes") == 2
    assert value("decisionflow_reconciler_pass_failures_total") == 2
    assert value("decisionflow_reconciler_unknown") == 2  # not 0: nothing was learnt since
    assert value("decisionflow_reconciler_oldest_unknown_age_seconds") == 90.0
    metrics.record(_summary(0, None, completed=False))  # stopped by a signal: neither success nor failure
    assert not metrics.healthy()
    metrics.record(_summary(0, None))
    assert metrics.healthy()
    assert value("decisionflow_reconciler_consecutive_failed_passes") == 0
    assert value("decisionflow_reconciler_unknown") == 0


def test_a_pass_whose_every_lookup_failed_is_a_failed_pass_and_lookup_failures_and_escalations_are_counted() -> None:
    metrics = ReconcilerMetrics(unhealthy_after_failed_passes=2, wall_clock=lambda: 1_700_000_000.0)
    value = metrics.registry.get_sample_value
    metrics.record(_summary(3, 40.0, lookup_failures=3))
    metrics.record(_summary(3, 50.0, lookup_failures=3))
    assert not metrics.healthy()
    assert value("decisionflow_reconciler_consecutive_failed_passes") == 2
    assert value("decisionflow_reconciler_pass_failures_total") == 2
    assert value("decisionflow_reconciler_last_success_timestamp_seconds") == 0
    assert value("decisionflow_reconciler_lookup_failures_total") == 6
    assert value("decisionflow_reconciler_unknown") == 3  # the listing is still true
    metrics.record(_summary(3, 60.0, lookup_failures=1, escalated=1))  # one lookup failed, two answered
    assert metrics.healthy() and value("decisionflow_reconciler_consecutive_failed_passes") == 0
    assert value("decisionflow_reconciler_escalated_total") == 1
    metrics.record(_summary(0, None))  # nothing open: nothing to look up, a success
    assert metrics.healthy() and value("decisionflow_reconciler_last_success_timestamp_seconds") == 1.7e9


@pytest.fixture
def reconciler_loop(tmp_path: Path) -> Iterator[Callable[..., tuple[int, subprocess.Popen[bytes]]]]:
    """Start decisionflow-reconciler --interval with a metrics port; stopped at the end."""
    running: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> tuple[int, subprocess.Popen[bytes]]:
        port = free_port()
        log = (tmp_path / f"reconciler-{len(running)}.stderr").open("wb")
        process = subprocess.Popen(
            reconciler_command(["--interval", "0.2", "--metrics-port", str(port), *args]),
            cwd=ROOT,
            env=child_environment(),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        running.append(process)
        return port, process

    yield start
    for process in running:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _health_command(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HEALTH, "health", "--http", url], capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.slow
def test_an_unreachable_orchestrator_turns_health_off_and_a_good_pass_turns_it_back_on(
    make_stack: Callable[..., Stack], reconciler_loop: Callable[..., tuple[int, subprocess.Popen[bytes]]]
) -> None:
    stack = make_stack()
    orchestrator_port = closed_port()
    port, process = reconciler_loop(
        "--orchestrator-target",
        f"127.0.0.1:{orchestrator_port}",
        "--receiver-target",
        f"127.0.0.1:{stack.receiver_port}",
        "--timeout-seconds",
        "0.5",
        "--unhealthy-after-failed-passes",
        "2",
    )
    assert wait_until(lambda: health_status(port) == 503), "never NOT_SERVING"
    failing = scrape(port)
    assert failing.value("decisionflow_reconciler_consecutive_failed_passes") >= 2
    assert failing.value("decisionflow_reconciler_pass_failures_total") >= 2
    assert failing.value("decisionflow_reconciler_last_success_timestamp_seconds") == 0
    url = f"http://127.0.0.1:{port}/healthz"
    unhealthy = _health_command(url)
    assert (unhealthy.returncode, unhealthy.stdout.strip()) == (1, "NOT_SERVING (HTTP 503)")

    stack.start_orchestrator(address=f"127.0.0.1:{orchestrator_port}")
    assert wait_until(lambda: health_status(port) == 200), "never SERVING again"
    recovered = scrape(port)
    assert recovered.value("decisionflow_reconciler_consecutive_failed_passes") == 0
    assert recovered.value("decisionflow_reconciler_last_success_timestamp_seconds") > 0
    healthy = _health_command(url)
    assert (healthy.returncode, healthy.stdout.strip()) == (0, "SERVING")
    assert process.poll() is None  # the loop outlived the outage


@pytest.mark.slow
def test_a_receiver_that_is_down_fails_the_passes_turns_health_off_and_its_return_turns_it_back_on(
    make_stack: Callable[..., Stack], reconciler_loop: Callable[..., tuple[int, subprocess.Popen[bytes]]]
) -> None:
    stack = make_stack(receiver_failpoints=LOST_REPLY)
    op = approve_unknown(stack, "DOWN-1")
    receiver_port = closed_port()
    port, process = reconciler_loop(
        "--orchestrator-target",
        f"127.0.0.1:{stack.orchestrator_port}",
        "--receiver-target",
        f"127.0.0.1:{receiver_port}",
        "--timeout-seconds",
        "0.5",
        "--unhealthy-after-failed-passes",
        "2",
    )
    assert wait_until(lambda: health_status(port) == 503), "never NOT_SERVING with the receiver down"
    failing = scrape(port)
    assert failing.value("decisionflow_reconciler_consecutive_failed_passes") >= 2
    assert failing.value("decisionflow_reconciler_pass_failures_total") >= 2
    assert failing.value("decisionflow_reconciler_lookup_failures_total") >= 2
    assert failing.value("decisionflow_reconciler_last_success_timestamp_seconds") == 0
    assert failing.value("decisionflow_reconciler_unknown") == 1

    stack.start_receiver("", address=f"127.0.0.1:{receiver_port}")  # the same database: the effect is there
    assert wait_until(lambda: health_status(port) == 200), "never SERVING again"
    assert wait_until(lambda: operation(stack, op).state == common_pb2.OPERATION_STATE_COMMITTED)
    recovered = scrape(port)
    assert recovered.value("decisionflow_reconciler_consecutive_failed_passes") == 0
    assert recovered.value("decisionflow_reconciler_last_success_timestamp_seconds") > 0
    assert process.poll() is None


def test_the_health_command_takes_only_http_urls() -> None:
    refused = _health_command("file:///etc/passwd")
    assert refused.returncode == 2
    assert "http:// or https://" in refused.stderr
