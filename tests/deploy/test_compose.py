"""docker-compose.yml cannot run here (no Docker engine), so it is checked against the real CLIs and
configuration: every command and flag exists, every variable is one the service reads, every
service has a healthcheck, every mounted secret is one deploy/make-secrets.sh writes, and those
secrets really start a TLS + token-authenticated server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from decisionflow.settings import Setting
from effect_receiver.config import SETTINGS as RECEIVER_SETTINGS
from orchestrator.config import SETTINGS as ORCHESTRATOR_SETTINGS
from reconciler.config import SETTINGS as RECONCILER_SETTINGS
from tests.support.cli import SCRIPTS, command_words, help_text, names_flag
from tests.support.servers import spawn

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SETTINGS_BY_SCRIPT: dict[str, tuple[Setting[Any], ...]] = {
    "decisionflow-receiver": RECEIVER_SETTINGS,
    "decisionflow-orchestrator": ORCHESTRATOR_SETTINGS,
    "decisionflow-reconciler": RECONCILER_SETTINGS,
}
OURS = sorted(name for name, service in COMPOSE["services"].items() if "build" in service)


def test_topology() -> None:
    services = COMPOSE["services"]
    assert {"postgres", "receiver", "orchestrator-1", "orchestrator-2", "reconciler"} <= set(services)
    first, second = services["orchestrator-1"], services["orchestrator-2"]
    url = "DECISIONFLOW_ORCHESTRATOR_DATABASE_URL"
    assert first["environment"][url] == second["environment"][url]
    assert first["environment"][url].startswith("postgresql://")
    assert "--interval" in services["reconciler"]["command"]


@pytest.mark.parametrize("name", sorted(COMPOSE["services"]))
def test_every_service_has_a_healthcheck(name: str) -> None:
    check = COMPOSE["services"][name].get("healthcheck", {})
    assert check.get("test"), f"{name} has no healthcheck"


@pytest.mark.slow
@pytest.mark.parametrize("name", OURS)
def test_commands_and_flags_exist(name: str) -> None:
    service = COMPOSE["services"][name]
    for argv in (service["command"], service["healthcheck"]["test"][1:]):
        assert argv[0] in SCRIPTS, f"{argv[0]} is not a console script of the project"
        words = command_words(argv)
        if len(words) > 1 and argv[0] == "decisionflow-orchestrator":
            words = words[:1]  # "serve" is the default command and takes the server flags
        usage = help_text(words)
        for flag in (arg.split("=")[0] for arg in argv if arg.startswith("--")):
            assert names_flag(usage, flag), (name, flag)


@pytest.mark.parametrize("name", OURS)
def test_every_variable_is_one_the_service_reads(name: str) -> None:
    service = COMPOSE["services"][name]
    known = {s.env for s in SETTINGS_BY_SCRIPT[service["command"][0]] if not s.flag_only}
    variables = set(service["environment"])
    env_file = service.get("env_file")
    if env_file:
        assert env_file == "./deploy/secrets/checkpoint.env"
        variables.add("DECISIONFLOW_CHECKPOINT_KEYS")
    unknown = sorted(v for v in variables if v not in known)
    assert not unknown, f"{name} sets variables its configuration does not read: {unknown}"


def test_mounted_secrets_are_made_by_the_script() -> None:
    script = (ROOT / "deploy" / "make-secrets.sh").read_text()
    mentioned: set[str] = set()
    for name in OURS:
        service = COMPOSE["services"][name]
        texts = [*service["environment"].values(), *service["healthcheck"]["test"]]
        mentioned |= {Path(t).name for t in texts if isinstance(t, str) and t.startswith("/run/decisionflow/")}
    assert mentioned
    for filename in sorted(mentioned):
        assert filename in script, f"{filename} is mounted but deploy/make-secrets.sh does not write it"


def _tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def _local(environment: dict[str, Any], secrets: Path) -> dict[str, str]:
    # The compose environment with the mounted secrets folder mapped to the local copy.
    return {
        key: str(value).replace("/run/decisionflow", str(secrets))
        for key, value in environment.items()
        if key.startswith(("DECISIONFLOW_CREDENTIALS", "DECISIONFLOW_TLS", "DECISIONFLOW_RECEIVER_CA"))
        or key.endswith("TOKEN_FILE")
    }


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make the secrets")
def test_compose_secrets_run_the_topology_over_tls(tmp_path: Path) -> None:
    """make-secrets output + the compose environment: receiver, orchestrator, client commands and the
    reconciler all talk TLS with bearer tokens; plaintext is refused."""
    secrets = tmp_path / "secrets"
    made = subprocess.run(
        ["bash", str(ROOT / "deploy" / "make-secrets.sh"), str(secrets)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=dict(os.environ, DECISIONFLOW=_tool("decisionflow")),
    )
    assert made.returncode == 0, made.stderr
    services = COMPOSE["services"]
    receiver = spawn(
        "effect_receiver.main",
        ["--address", "127.0.0.1:0", "--database-url", f"sqlite:///{tmp_path / 'receiver.db'}"],
        tmp_path,
        "receiver",
        env=_local(services["receiver"]["environment"], secrets),
    )
    orchestrator = None
    try:
        checkpoint_key = (secrets / "checkpoint.env").read_text().strip().split("=", 1)[1]
        orchestrator_env = _local(services["orchestrator-1"]["environment"], secrets)
        orchestrator_env.update(
            DECISIONFLOW_CHECKPOINT_KEYS=checkpoint_key, DECISIONFLOW_RECEIVER_TARGET=f"localhost:{receiver.port}"
        )
        orchestrator = spawn(
            "orchestrator.main",
            ["--address", "127.0.0.1:0", "--database-url", f"sqlite:///{tmp_path / 'orchestrator.db'}"],
            tmp_path,
            "orchestrator",
            env=orchestrator_env,
        )
        ca = str(secrets / "ca.pem")
        health = _run([_tool("decisionflow"), "health", "--target", f"localhost:{receiver.port}", "--ca-file", ca])
        assert health.returncode == 0 and health.stdout.strip() == "SERVING", health.stderr
        plaintext = _run([_tool("decisionflow"), "health", "--target", f"127.0.0.1:{receiver.port}"])
        assert plaintext.returncode == 1

        proposal = tmp_path / "T-7.json"
        proposal.write_text(
            '{"case_id": "T-7", "action": "record_support_review", "body": "Known firmware issue.", '
            '"evidence": [{"source_id": "HOLD-7", "version": 4, "quotation": "Firmware 4.2.0 may hold."}], '
            '"policy": {"name": "support-replies", "version_label": "2026-10", "allowance_units": 9, "rules": {}}}'
        )
        client = [_tool("decisionflow")]
        common = ["--target", f"localhost:{orchestrator.port}", "--ca-file", ca]
        started = _run([*client, "start", str(proposal), *common, "--token-file", str(secrets / "author.token")])
        assert started.returncode == 0, started.stderr
        op = json.loads(started.stdout)["operation_id"]
        approved = _run([*client, "approve", op, *common, "--token-file", str(secrets / "reviewer.token")])
        assert approved.returncode == 0, approved.stderr
        assert json.loads(approved.stdout)["state"] == "COMMITTED"
        refused = _run([*client, "approve", op, *common])  # no token
        assert refused.returncode == 3

        reconciler_env = _local(services["reconciler"]["environment"], secrets)
        reconciled = subprocess.run(
            [
                _tool("decisionflow-reconciler"),
                "--once",
                "--json",
                "--orchestrator-target",
                f"localhost:{orchestrator.port}",
                "--receiver-target",
                f"localhost:{receiver.port}",
                "--ca-file",
                ca,
                "--token-file",
                reconciler_env["DECISIONFLOW_RECONCILER_TOKEN_FILE"],
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")},
        )
        assert reconciled.returncode == 0, reconciled.stderr
    finally:
        if orchestrator is not None:
            assert orchestrator.stop() == 0
        assert receiver.stop() == 0
