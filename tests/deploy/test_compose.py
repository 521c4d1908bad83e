"""docker-compose.yml cannot run here (no Docker engine), so it is checked against the real CLIs and
configuration: every command and flag exists, every variable is one the service reads, every
service has a healthcheck, every mounted secret is one deploy/make-secrets.sh writes, and those
secrets really start a TLS + token-authenticated server."""

from __future__ import annotations

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
SETTINGS_BY_SCRIPT: dict[str, tuple[Setting, ...]] = {
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


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make the secrets")
def test_secrets_start_a_tls_authenticated_receiver(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    env = dict(os.environ, DECISIONFLOW=str(Path(sys.executable).with_name("decisionflow")))
    made = subprocess.run(
        ["bash", str(ROOT / "deploy" / "make-secrets.sh"), str(secrets)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert made.returncode == 0, made.stderr
    environment: dict[str, Any] = COMPOSE["services"]["receiver"]["environment"]
    local = {
        key: str(value).replace("/run/decisionflow", str(secrets))
        for key, value in environment.items()
        if key.startswith(("DECISIONFLOW_CREDENTIALS", "DECISIONFLOW_TLS"))
    }
    receiver = spawn(
        "effect_receiver.main",
        ["--address", "127.0.0.1:0", "--database-url", f"sqlite:///{tmp_path / 'receiver.db'}"],
        tmp_path,
        "receiver",
        env=local,
    )
    try:
        health = subprocess.run(
            [
                str(Path(sys.executable).with_name("decisionflow")),
                "health",
                "--target",
                f"localhost:{receiver.port}",
                "--ca-file",
                str(secrets / "ca.pem"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert health.returncode == 0 and health.stdout.strip() == "SERVING", health.stderr
        plaintext = subprocess.run(
            [str(Path(sys.executable).with_name("decisionflow")), "health", "--target", f"127.0.0.1:{receiver.port}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert plaintext.returncode == 1
    finally:
        assert receiver.stop() == 0
