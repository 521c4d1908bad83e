"""``decisionflow health`` as a script uses it: one check, or ``--wait`` until a starting server serves."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from decisionflow_demo.launch import RECEIVER_MODULE, receiver_args
from decisionflow_server.foundation.processes import child_environment, free_port, launch, spawn
from tests.support.auth import ROLES
from tests.support.secure import write_network_security

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def _health(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "decisionflow_cli", "health", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def test_wait_reports_serving_once_a_late_server_starts(tmp_path: Path) -> None:
    port = free_port()
    waiting = _health("--target", f"127.0.0.1:{port}", "--wait", "30")
    time.sleep(1.0)
    assert waiting.poll() is None, "health --wait gave up before its time"
    receiver = launch(
        RECEIVER_MODULE,
        receiver_args(f"sqlite:///{tmp_path / 'r.db'}", address=f"127.0.0.1:{port}"),
        tmp_path,
        "receiver",
    )
    try:
        out, err = waiting.communicate(timeout=40)
    finally:
        receiver.stop()
    assert (waiting.returncode, out, err) == (0, "SERVING\n", "")


def test_nothing_listening_fails_with_one_line_after_the_wait() -> None:
    port = free_port()
    out, err = _health("--target", f"127.0.0.1:{port}", "--wait", "1", "--timeout", "0.5").communicate(timeout=30)
    assert out == ""
    assert err == f"decisionflow health: 127.0.0.1:{port}: UNAVAILABLE\n"


def test_a_wait_out_of_range_is_a_usage_error() -> None:
    checking = _health("--target", "127.0.0.1:1", "--wait", "-1")
    _out, err = checking.communicate(timeout=30)
    assert checking.returncode == 2
    assert "--wait must be 0 to 3600 seconds" in err


# What a probe run must not load: the storage and web stacks, the token verifier, the tracing SDK and
# API, retries, the client package behind the other commands, and the servers and the demo.
HEAVY_FOR_A_PROBE = (
    "sqlalchemy",
    "alembic",
    "agent_framework",
    "starlette",
    "uvicorn",
    "jinja2",
    "authlib",
    "opentelemetry",
    "jwt",
    "cryptography",
    "tenacity",
    "decisionflow.auth",
    "decisionflow.client",
    "decisionflow_demo",
    "decisionflow_server.runtime.tracing",
    "orchestrator",
    "effect_receiver",
    "reconciler",
)


def _probe(argv: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str], list[str]]:
    """Run argv with Python's import profile on; return the run, the modules it imported and its other stderr lines."""
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=child_environment({"PYTHONPROFILEIMPORTTIME": "1"}),
    )
    imported: set[str] = set()
    other: list[str] = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:"):
            imported.add(line.rsplit("|", 1)[1].strip())
        else:
            other.append(line)
    return done, imported, other


def _heavy(imported: set[str]) -> list[str]:
    return sorted(m for m in imported if any(m == p or m.startswith(p + ".") for p in HEAVY_FOR_A_PROBE))


def test_a_tls_probe_loads_grpc_and_nothing_heavy(tmp_path: Path) -> None:
    """The Kubernetes probe's command line, run as the pod runs it: the console script, TLS, a CA file."""
    security = write_network_security(tmp_path / "secrets", {"receiver": ["localhost"]}, {"walter": ROLES["walter"]})
    receiver = spawn(
        RECEIVER_MODULE,
        receiver_args(f"sqlite:///{tmp_path / 'r.db'}", extra=security.server_argv("receiver")),
        tmp_path,
        "receiver",
    )
    probe = [
        str(Path(sys.executable).with_name("decisionflow")),
        "health",
        "--target",
        f"localhost:{receiver.port}",
        "--ca-file",
        str(security.ca_file),
    ]
    try:
        serving, imported, other = _probe(probe)
    finally:
        assert receiver.stop() == 0
    assert (serving.returncode, serving.stdout, other) == (0, "SERVING\n", [])
    # The profile is read: the check itself shows up, so an empty heavy list means something.
    assert {"grpc", "grpc_health.v1.health_pb2_grpc", "decisionflow.channels", "decisionflow.tls"} <= imported
    assert _heavy(imported) == []

    stopped, imported, other = _probe([*probe, "--timeout", "1"])
    assert (stopped.returncode, stopped.stdout) == (1, "")
    assert other == [f"decisionflow health: localhost:{receiver.port}: UNAVAILABLE"]
    assert _heavy(imported) == []
