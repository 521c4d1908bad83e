"""--version on every command, and the tracing switch as the processes see it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from decisionflow_server.foundation.version import installed_version
from tests.support.cli import ROOT, SCRIPTS

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

MODULES = {name: target.split(":")[0] for name, target in SCRIPTS.items()}


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False, env=env
    )


@pytest.mark.parametrize("command", sorted(MODULES))
def test_version_prints_name_and_version_and_exits_0(command: str) -> None:
    done = _run(["-m", MODULES[command], "--version"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{command} {installed_version()}"
    assert installed_version() != "unknown"


def test_without_an_exporter_no_sdk_is_loaded_and_no_span_records() -> None:
    probe = (
        "import sys\n"
        "import orchestrator.main, effect_receiver.main\n"
        "from opentelemetry import trace\n"
        "from decisionflow_server.runtime import tracing\n"
        "print(tracing.configure('x', {'OTEL_TRACES_EXPORTER': 'none'}), tracing.configure('x', {}))\n"
        "print(any(m.startswith('opentelemetry.sdk') for m in sys.modules))\n"
        "print(trace.get_tracer('t').start_span('s').is_recording())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = _run(["-c", probe], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False", "False"]


def test_an_exporter_that_is_not_installed_stops_the_start_with_status_2() -> None:
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "zipkin"}
    done = _run(["-m", "effect_receiver.main", "--database-url", "sqlite://", "--address", "127.0.0.1:0"], env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "decisionflow-receiver: OTEL_TRACES_EXPORTER: no trace exporter named 'zipkin' is installed"
    )
