"""Addresses and targets always carry a port: ``--address localhost`` is refused as a configuration
error (exit 2) instead of listening on 443, and so is ``--target vm``; loopback is decided by the
literal host."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from decisionflow.addresses import grpc_target, is_loopback, split_host_port
from decisionflow_cli import main as cli_main
from decisionflow_server.foundation import settings
from decisionflow_server.foundation.processes import child_environment
from effect_receiver import config as receiver_config
from orchestrator import config as orchestrator_config
from reconciler import config as reconciler_config

KEY = "k" * 32


@pytest.mark.parametrize(
    ("address", "host", "port"),
    [
        ("127.0.0.1:50051", "127.0.0.1", 50051),
        ("[::1]:50051", "::1", 50051),
        ("host:0", "host", 0),
        ("0.0.0.0:65535", "0.0.0.0", 65535),
        ("[::]:0", "::", 0),
        ("orchestrator-1:50051", "orchestrator-1", 50051),
    ],
)
def test_host_and_port_are_split_as_given(address: str, host: str, port: int) -> None:
    assert split_host_port(address) == (host, port)
    assert settings.target(address) == address


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("localhost", "no port"),
        ("10.0.0.1", "no port"),
        ("vm", "no port"),
        ("[::1]", "no port"),
        ("[::1]50051", "no port"),
        ("::1", "write an IPv6 address in brackets"),
        ("::1:50051", "write an IPv6 address in brackets"),
        (":50051", "no host"),
        ("[]:50051", "no host"),
        ("host:", "the port must be a number"),
        ("host:http", "the port must be a number"),
        ("host:65536", "the port must be a number"),
        ("host:-1", "the port must be a number"),
        ("host: 1", "the port must be a number"),
    ],
)
def test_an_address_without_a_usable_port_or_host_is_refused(address: str, why: str) -> None:
    with pytest.raises(ValueError, match=rf"expected host:port or \[IPv6\]:port, not .*\({why}"):
        settings.target(address)


def test_a_unix_socket_target_needs_a_path() -> None:
    assert settings.target("unix:/run/decisionflow.sock") == "unix:/run/decisionflow.sock"
    with pytest.raises(ValueError, match="socket path"):
        settings.target("unix:")


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("localhost:1", True),
        ("LocalHost:1", True),
        ("127.0.0.1:1", True),
        ("127.255.0.9:1", True),
        ("[::1]:1", True),
        ("vm:1", False),
        ("localhost.localdomain:1", False),
        ("10.0.0.5:1", False),
        ("0.0.0.0:1", False),
        ("[::]:1", False),
        ("unix:/tmp/s", False),
        ("localhost", False),
    ],
)
def test_loopback_is_decided_by_the_literal_host(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


Loader = Callable[[Sequence[str], Mapping[str, str]], Any]
LOADERS: dict[str, tuple[Loader, list[str], dict[str, str]]] = {
    "orchestrator": (orchestrator_config.load, [], {"DECISIONFLOW_CHECKPOINT_KEYS": KEY}),
    "receiver": (receiver_config.load, [], {}),
    "reconciler": (reconciler_config.load, ["--once"], {}),
}


@pytest.mark.parametrize(
    ("service", "flag", "env"),
    [
        ("orchestrator", "--address", "DECISIONFLOW_ORCHESTRATOR_ADDRESS"),
        ("orchestrator", "--receiver-target", "DECISIONFLOW_RECEIVER_TARGET"),
        ("receiver", "--address", "DECISIONFLOW_RECEIVER_ADDRESS"),
        ("reconciler", "--orchestrator-target", "DECISIONFLOW_ORCHESTRATOR_TARGET"),
        ("reconciler", "--receiver-target", "DECISIONFLOW_RECEIVER_TARGET"),
    ],
)
@pytest.mark.parametrize("value", ["localhost", "10.0.0.1"])
def test_every_service_refuses_an_address_without_a_port(
    service: str, flag: str, env: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    load, argv, environ = LOADERS[service]
    with pytest.raises(SystemExit) as exited:
        load([*argv, flag, value], environ)
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{flag} (env {env}): expected host:port" in error and "(no port)" in error, error


@pytest.mark.parametrize(
    "argv",
    [["status", "op-v1-x", "--target", "vm"], ["health", "--target", "vm"], ["health", "--target", "10.0.0.1"]],
)
def test_the_command_line_refuses_a_target_without_a_port(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "--target" in line and "expected host:port" in line and "(no port)" in line


@pytest.mark.parametrize(
    ("target", "given_to_grpc", "loopback"),
    [
        ("127.0.0.1:50051,127.0.0.1:50052", "ipv4:127.0.0.1:50051,127.0.0.1:50052", True),
        ("ipv4:127.0.0.1:50051,10.0.0.6:50051", "ipv4:127.0.0.1:50051,10.0.0.6:50051", False),
        ("[::1]:50051,[::1]:50052", "ipv6:[::1]:50051,[::1]:50052", True),
        ("orchestrator:50051", "orchestrator:50051", False),
    ],
)
def test_a_client_target_may_list_several_ip_addresses(target: str, given_to_grpc: str, loopback: bool) -> None:
    assert settings.orchestrator_target_setting().parse(target) == target
    assert grpc_target(target) == given_to_grpc
    assert is_loopback(target) is loopback


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("orchestrator-1:50051,orchestrator-2:50051", "a name that resolves to several addresses is given alone"),
        ("127.0.0.1:50051,[::1]:50051", "expected IP addresses of one family"),
        ("127.0.0.1:50051,", "(no port)"),
        ("127.0.0.1:50051,127.0.0.1", "(no port)"),
    ],
)
def test_the_command_line_refuses_a_list_of_targets_it_cannot_spread_calls_over(
    target: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["status", "op-v1-x", "--target", target]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "--target" in line and why in line, line


@pytest.mark.slow
def test_the_receiver_given_only_a_host_exits_2_instead_of_listening_on_443(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "decisionflow-receiver"), "--address", "localhost"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=child_environment({"DECISIONFLOW_RECEIVER_DATABASE_URL": str(tmp_path / "receiver.db")}),
    )
    assert done.returncode == 2
    assert "--address (env DECISIONFLOW_RECEIVER_ADDRESS): expected host:port" in done.stderr
    assert "listening" not in done.stdout
    assert not (tmp_path / "receiver.db").exists()
