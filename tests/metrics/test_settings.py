"""The metrics settings of each service: off unless a port is given, the address defaults to
loopback, flag or environment, a bad value is a usage error, and a port that cannot be bound
stops the server with one line naming both settings."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from decisionflow_server.foundation.processes import child_environment
from effect_receiver import config as receiver_config
from orchestrator import config as orchestrator_config
from reconciler import config as reconciler_config

BIN = Path(sys.executable).parent
KEY = "k" * 32


def test_metrics_are_off_by_default_and_bind_loopback() -> None:
    receiver = receiver_config.load([], {})
    orchestrator = orchestrator_config.load([], {"DECISIONFLOW_CHECKPOINT_KEYS": KEY})
    reconciler = reconciler_config.load(["--once"], {})
    for loaded in (receiver, orchestrator, reconciler):
        assert (loaded.metrics_port, loaded.metrics_address) == (None, "127.0.0.1")
    assert reconciler.unhealthy_after_failed_passes == 3


def test_metrics_settings_come_from_the_environment_or_the_flags() -> None:
    receiver = receiver_config.load(
        [], {"DECISIONFLOW_RECEIVER_METRICS_PORT": "9101", "DECISIONFLOW_RECEIVER_METRICS_ADDRESS": "0.0.0.0"}
    )
    assert (receiver.metrics_port, receiver.metrics_address) == (9101, "0.0.0.0")
    orchestrator = orchestrator_config.load(
        ["--metrics-port", "9100"],
        {"DECISIONFLOW_CHECKPOINT_KEYS": KEY, "DECISIONFLOW_ORCHESTRATOR_METRICS_PORT": "1"},
    )
    assert orchestrator.metrics_port == 9100  # the flag wins
    reconciler = reconciler_config.load(
        ["--interval", "30"],
        {
            "DECISIONFLOW_RECONCILER_METRICS_PORT": "9102",
            "DECISIONFLOW_RECONCILER_UNHEALTHY_AFTER_FAILED_PASSES": "5",
        },
    )
    assert (reconciler.metrics_port, reconciler.unhealthy_after_failed_passes) == (9102, 5)


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--metrics-port", "70000", "from 0 to 65535"),
        ("--metrics-address", " ", "expected a value"),
        ("--unhealthy-after-failed-passes", "0", "from 1 to"),
    ],
)
def test_a_bad_value_is_a_usage_error(flag: str, value: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        reconciler_config.load(["--interval", "30", flag, value], {})
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another socket is listening on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


@pytest.mark.parametrize(
    ("script", "prefix", "environ"),
    [
        ("decisionflow-receiver", "DECISIONFLOW_RECEIVER", {}),
        ("decisionflow-orchestrator", "DECISIONFLOW_ORCHESTRATOR", {"DECISIONFLOW_CHECKPOINT_KEYS": KEY}),
    ],
)
def test_a_metrics_port_in_use_stops_the_server_in_one_line(
    script: str, prefix: str, environ: dict[str, str], held_port: int, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            str(BIN / script),
            *("--address", "127.0.0.1:0", "--database-url", str(tmp_path / "service.db")),
            *("--metrics-port", str(held_port)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=child_environment(environ),
    )
    assert done.returncode == 1  # the port may be free later: a runtime failure, as for --address
    [line] = done.stderr.splitlines()
    entry = json.loads(line)
    assert entry["message"] == (
        f"{script}: cannot serve metrics on 127.0.0.1:{held_port} (--metrics-port / {prefix}_METRICS_PORT, "
        f"--metrics-address / {prefix}_METRICS_ADDRESS): Address already in use"
    )
    assert "listening" not in done.stdout
    assert not (tmp_path / "service.db").exists()  # refused before the database is touched
