"""A bearer token leaves loopback in cleartext only on an explicit opt-in: open_channel and
open_aio_channel decide by the literal host (nothing is resolved), and every caller that holds a
token (the decisionflow commands, the reconciler, the orchestrator's receiver channel) surfaces
the opt-in as a setting and refuses without it, before anything is sent or written."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import socket
from pathlib import Path

import grpc
import pytest

from decisionflow.channels import CleartextTokenRefused, open_aio_channel, open_channel
from decisionflow.v1 import review_pb2, review_pb2_grpc
from decisionflow_cli import main as cli_main
from decisionflow_console import config as console_config
from decisionflow_server.foundation.processes import free_port
from decisionflow_server.foundation.startup_errors import EXIT_CONFIGURATION, StartupError
from decisionflow_server.runtime.auth import AUTH_STATUS, RPC_ROLES, AuthInterceptor
from decisionflow_server.runtime.serving import start_server
from orchestrator import main as orchestrator_main
from orchestrator.config import OrchestratorConfig
from tests.security.pki import Pki, make_pki
from tests.support.auth import TOKENS, ContractRecorder, known_credentials
from tests.support.reconciling import run_reconciler

TOKEN = TOKENS["rita"]
# Beyond loopback by their literal host, whatever a resolver would answer for them ("vm" names this
# very machine in some sandboxes, and a name like 127.0.0.1.nip.io resolves to loopback).
BEYOND_LOOPBACK = (
    "vm:50051",
    "10.0.0.5:50051",
    "[2001:db8::1]:50051",
    "0.0.0.0:50051",
    "localhost.example.com:50051",
    "127.0.0.1.nip.io:50051",
)
LOOPBACK = ("localhost:50051", "LOCALHOST:50051", "127.0.0.1:50051", "127.8.9.10:50051", "[::1]:50051")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command line")
    return make_pki(tmp_path_factory.mktemp("pki"), clients=())


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    file = tmp_path / "rita.token"
    file.write_text(TOKEN + "\n")
    return file


def _open_aio(target: str, **kwargs: object) -> None:
    async def scenario() -> None:
        channel = open_aio_channel(target, **kwargs)  # type: ignore[arg-type]
        await channel.close(None)

    asyncio.run(scenario())


@pytest.mark.parametrize("target", BEYOND_LOOPBACK)
def test_a_token_without_tls_beyond_loopback_is_refused(target: str) -> None:
    with pytest.raises(CleartextTokenRefused, match=r"refusing to send a bearer token in cleartext to .*:50051"):
        open_channel(target, token=TOKEN)
    with pytest.raises(CleartextTokenRefused, match="refusing to send a bearer token in cleartext"):
        _open_aio(target, token=TOKEN)


@pytest.mark.parametrize("target", LOOPBACK)
def test_a_token_in_cleartext_to_loopback_is_allowed(target: str) -> None:
    open_channel(target, token=TOKEN).close()
    _open_aio(target, token=TOKEN)


def test_beyond_loopback_tls_the_opt_in_or_no_token_are_allowed(pki: Pki) -> None:
    for kwargs in ({"token": TOKEN, "ca_file": pki.cert("ca")}, {"token": TOKEN, "allow_cleartext_token": True}, {}):
        open_channel("vm:50051", **kwargs).close()  # type: ignore[arg-type]
        _open_aio("vm:50051", **kwargs)


def _this_host_by_name() -> str:
    name = socket.gethostname()
    try:
        socket.getaddrinfo(name, None)
    except socket.gaierror:
        pytest.skip(f"this host's name {name!r} does not resolve")
    if name.lower() == "localhost":
        pytest.skip("this host is named localhost")
    return name


def test_with_the_opt_in_the_token_reaches_a_server_named_beyond_loopback() -> None:
    name = _this_host_by_name()
    recorder = ContractRecorder()

    async def approve(target: str, allow: bool) -> grpc.StatusCode:
        async with open_aio_channel(target, token=TOKEN, allow_cleartext_token=allow) as channel:
            try:
                await review_pb2_grpc.ReviewServiceStub(channel).Approve(review_pb2.ApproveRequest(), timeout=10)
            except grpc.aio.AioRpcError as error:
                return error.code()
        return grpc.StatusCode.OK

    async def scenario() -> None:
        # Every interface, so that this host's name reaches it whatever address it resolves to.
        running = await start_server(
            "0.0.0.0:0",
            recorder.register,
            status_table=AUTH_STATUS,
            auth=AuthInterceptor(known_credentials(), RPC_ROLES),
        )
        try:
            target = f"{name}:{running.port}"
            with pytest.raises(CleartextTokenRefused):
                await approve(target, allow=False)
            assert recorder.principals == []  # refused before any call
            assert await approve(target, allow=True) == grpc.StatusCode.OK
        finally:
            await running.server.stop(None)

    asyncio.run(scenario())
    assert [p.name for p in recorder.principals] == ["rita"]


def test_the_review_commands_refuse_then_honour_the_opt_in(
    token_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DECISIONFLOW_ORCHESTRATOR_INSECURE_CLEARTEXT_TOKEN", raising=False)
    argv = ["status", "op-v1-x", "--target", "vm:50051", "--token-file", str(token_file), "--timeout", "1"]
    assert cli_main(argv) == 2
    refused = capsys.readouterr()
    assert refused.out == ""
    [line] = refused.err.splitlines()
    assert "refusing to send a bearer token in cleartext to vm:50051" in line
    assert "--ca-file" in line and "--insecure-cleartext-token=true" in line
    # With the opt-in (here from the environment) the command goes on to call: nothing listens there.
    name = _this_host_by_name()
    monkeypatch.setenv("DECISIONFLOW_ORCHESTRATOR_INSECURE_CLEARTEXT_TOKEN", "true")
    closed = ["status", "op-v1-x", "--target", f"{name}:{free_port()}", "--token-file", str(token_file)]
    assert cli_main([*closed, "--timeout", "1"]) == 1
    assert '"code": "UNAVAILABLE"' in capsys.readouterr().out


def test_the_reconciler_refuses_before_calling_and_names_the_opt_in(token_file: Path) -> None:
    argv = ["--once", "--orchestrator-target", "vm:50051", "--orchestrator-token-file", str(token_file)]
    run = run_reconciler(argv)
    assert run.returncode == 2 and run.stdout == ""
    [line] = run.stderr.splitlines()
    entry = json.loads(line)
    assert entry["level"] == "error" and "error" not in entry  # no traceback below debug
    assert entry["message"].startswith("decisionflow-reconciler: cannot call (--orchestrator-target / ")
    assert "--insecure-cleartext-token / DECISIONFLOW_RECONCILER_INSECURE_CLEARTEXT_TOKEN" in entry["message"]
    assert "refusing to send a bearer token in cleartext to vm:50051" in entry["message"]


def test_the_orchestrator_refuses_a_cleartext_receiver_channel_before_opening_its_database(tmp_path: Path) -> None:
    database = tmp_path / "orchestrator.db"
    config = OrchestratorConfig(
        checkpoint_keys=(b"k" * 32,),
        address="127.0.0.1:0",
        database_url=f"sqlite:///{database}",
        receiver_target="vm:50061",
        receiver_token=TOKEN,
    )

    async def scenario(config: OrchestratorConfig) -> None:
        running = await orchestrator_main.create_server(config)
        await running.stop(0)

    with pytest.raises(StartupError) as refused:
        asyncio.run(scenario(config))
    assert refused.value.exit_status == EXIT_CONFIGURATION
    assert "--receiver-insecure-cleartext-token / DECISIONFLOW_RECEIVER_INSECURE_CLEARTEXT_TOKEN" in str(refused.value)
    assert not database.exists()
    asyncio.run(scenario(dataclasses.replace(config, receiver_allow_cleartext_token=True)))
    assert database.exists()


def test_each_command_reads_the_cleartext_opt_in_of_the_server_it_calls(
    token_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The orchestrator's opt-in says nothing of the receiver: receiver lookup still refuses, naming its own CA.
    monkeypatch.setenv("DECISIONFLOW_ORCHESTRATOR_INSECURE_CLEARTEXT_TOKEN", "true")
    monkeypatch.delenv("DECISIONFLOW_RECEIVER_INSECURE_CLEARTEXT_TOKEN", raising=False)
    argv = ["receiver", "lookup", "op-v1-x", "--target", "vm:50061", "--token-file", str(token_file), "--timeout", "1"]
    assert cli_main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "refusing to send a bearer token in cleartext to vm:50061" in line
    assert "--ca-file (env DECISIONFLOW_RECEIVER_CA_FILE)" in line


@pytest.mark.parametrize("retired", ["DECISIONFLOW_CA_FILE", "DECISIONFLOW_INSECURE_CLEARTEXT_TOKEN"])
def test_a_retired_variable_stops_the_command_and_names_its_successors(
    retired: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(retired, "true")
    assert cli_main(["status", "op-v1-x", "--timeout", "1"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f"{retired} is retired: set DECISIONFLOW_ORCHESTRATOR_" in line and "DECISIONFLOW_RECEIVER_" in line


@pytest.mark.parametrize(
    ("retired", "successor"),
    [
        ("DECISIONFLOW_CONSOLE_CA_FILE", "DECISIONFLOW_ORCHESTRATOR_CA_FILE"),
        ("DECISIONFLOW_CONSOLE_INSECURE_CLEARTEXT_TOKEN", "DECISIONFLOW_ORCHESTRATOR_INSECURE_CLEARTEXT_TOKEN"),
    ],
)
def test_the_console_refuses_a_retired_variable_and_names_its_successor(
    retired: str, successor: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        console_config.load([], {retired: "true"})
    assert stopped.value.code == 2
    assert f"{retired} is retired: set {successor}" in capsys.readouterr().err
