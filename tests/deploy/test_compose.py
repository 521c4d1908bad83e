"""docker-compose.yml cannot run here (no Docker engine), so it is checked against the real CLIs and
configuration: every command and flag exists, every variable is one the service reads, every
service has a healthcheck, every secret a service names is one it mounts and one
deploy/make-secrets.sh writes, and each service's own mounts really start a TLS +
token-authenticated topology. It is also checked against the Compose and PostgreSQL versions
docs/deployment.md says are supported."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from decisionflow.addresses import check_address, split_host_port
from decisionflow_cli.review._connection import CONNECTION_SETTINGS
from decisionflow_relay.config import SETTINGS as RELAY_SETTINGS
from decisionflow_server.foundation.settings import Setting
from effect_receiver.config import SETTINGS as RECEIVER_SETTINGS
from orchestrator.config import SETTINGS as ORCHESTRATOR_SETTINGS
from reconciler.config import SETTINGS as RECONCILER_SETTINGS
from tests.deploy.made import MadeSecrets, make_secrets_as_documented, secret_folders, world_traversable_directory
from tests.support.cli import SCRIPTS, command_words, help_text, names_flag
from tests.support.servers import spawn

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SETTINGS_BY_SCRIPT: dict[str, tuple[Setting[Any], ...]] = {
    "decisionflow-receiver": RECEIVER_SETTINGS,
    "decisionflow-orchestrator": ORCHESTRATOR_SETTINGS,
    "decisionflow-reconciler": RECONCILER_SETTINGS,
    "decisionflow-relay": RELAY_SETTINGS,
    "decisionflow": CONNECTION_SETTINGS,
}
OURS = sorted(name for name, service in COMPOSE["services"].items() if "build" in service)
_ORCHESTRATOR = "decisionflow-orchestrator"


# The Compose Specification's top-level elements, as Compose v2 reads them (x- extensions aside);
# `version` is obsolete there. Compose v1 knows neither `name` nor a file without `version`.
COMPOSE_V2_TOP_LEVEL = {"name", "services", "networks", "volumes", "secrets", "configs", "include"}


def _supported(component: str) -> str:
    """The supported version of component, from the table in docs/deployment.md#supported-versions."""
    table = (ROOT / "docs" / "deployment.md").read_text().split("## Supported versions", 1)[1]
    [row] = [line for line in table.splitlines() if line.startswith(f"| {component} |")]
    return row.split("|")[2].strip()


def _postgres_major() -> str:
    found = re.fullmatch(r"(\d+) .*", _supported("PostgreSQL"))
    assert found, _supported("PostgreSQL")
    return found[1]


def test_the_file_is_one_the_supported_compose_reads() -> None:
    assert _supported("Docker Compose").startswith("v2 "), "only Compose v2 is documented as supported"
    top_level = {key for key in COMPOSE if not key.startswith("x-")}
    assert top_level <= COMPOSE_V2_TOP_LEVEL, sorted(top_level - COMPOSE_V2_TOP_LEVEL)
    assert COMPOSE["name"] == "decisionflow"  # why Compose v1 refuses the file: said in the table
    assert "Compose v1" in (ROOT / "docker-compose.yml").read_text().split("\nname:", 1)[0]


def test_postgres_image_is_the_supported_major_version() -> None:
    image = COMPOSE["services"]["postgres"]["image"]
    repository, _, tag = image.partition(":")
    assert repository == "postgres" and re.split(r"[.-]", tag)[0] == _postgres_major(), image
    readme = (ROOT / "README.md").read_text()
    assert f"Docker Compose v2 and runs PostgreSQL {_postgres_major()}" in readme


@pytest.mark.postgres
def test_the_supported_postgres_major_is_the_one_the_tests_run_against(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, connect_timeout=5) as connection:
        row = connection.execute("SHOW server_version_num").fetchone()
    assert row is not None
    assert str(int(row[0]) // 10000) == _postgres_major()


def test_topology() -> None:
    services = COMPOSE["services"]
    assert {"postgres", "receiver", "orchestrator-1", "orchestrator-2", "reconciler", "audit-monitor"} <= set(services)
    first, second = services["orchestrator-1"], services["orchestrator-2"]
    # Both replicas read the URL of one database from the same secret; no password is in the file.
    url = "DECISIONFLOW_ORCHESTRATOR_DATABASE_URL_FILE"
    assert first["environment"][url] == second["environment"][url]
    target = Path(first["environment"][url]).name
    sources = [{e["source"] for e in replica["secrets"] if e["target"] == target} for replica in (first, second)]
    assert sources[0] == sources[1] == {"orchestrator_database_url"}
    assert "postgresql://" not in (ROOT / "docker-compose.yml").read_text()
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
    assert "env_file" not in service, "secrets are mounted as files, never passed as environment"
    unknown = sorted(v for v in service.get("environment", {}) if v not in known)
    assert not unknown, f"{name} sets variables its configuration does not read: {unknown}"


@pytest.mark.parametrize("name", sorted(COMPOSE["services"]))
def test_every_secret_a_service_names_is_one_it_mounts(name: str) -> None:
    # That deploy/make-secrets.sh writes every mounted file: test_make_secrets.py.
    service = COMPOSE["services"][name]
    texts = [*service.get("environment", {}).values(), *service["healthcheck"]["test"], *service.get("command", [])]
    named = {t for t in texts if isinstance(t, str) and t.startswith("/run/")}
    folders = secret_folders(service)
    mounted = {_mount_path(entry) for entry in service.get("secrets", [])}
    in_folders = {path for path in named if str(Path(path).parent) in folders.values()}
    assert named - in_folders <= mounted, f"{name} names {sorted(named - in_folders - mounted)} but does not mount them"
    for entry in service.get("secrets", []):
        source = entry if isinstance(entry, str) else entry["source"]
        file = COMPOSE["secrets"][source]["file"]
        assert file.startswith("./deploy/secrets/") and "/ca/" not in file, file
    # A folder of secrets is one make-secrets.sh makes for one file (test_make_secrets.py), never the CA's.
    assert all(folder.count("/") == 3 and not folder.endswith("/ca") for folder in folders), folders
    assert all("secrets" not in volume for volume in service.get("volumes", []) if volume.split(":")[0] not in folders)


# What a server reads again on SIGHUP (decisionflow_server/runtime/auth/_reload.py; the review rules file is
# not set here): `decisionflow token new` and editors put a new file in its place, which a file bind-mounted
# alone never shows (it stays the inode mounted at start-up), so each is read through its mounted folder.
RELOADED_ON_SIGHUP = ("DECISIONFLOW_CREDENTIALS_FILE", "DECISIONFLOW_REVIEW_RULES_FILE")


@pytest.mark.parametrize("name", sorted(COMPOSE["services"]))
def test_every_file_reloaded_on_sighup_is_read_through_a_mounted_folder(name: str) -> None:
    service = COMPOSE["services"][name]
    reloaded = [service["environment"][key] for key in RELOADED_ON_SIGHUP if key in service.get("environment", {})]
    folders = set(secret_folders(service).values())
    for path in reloaded:
        assert str(Path(path).parent) in folders, f"{name} reads {path} again on SIGHUP, not through a mounted folder"
        assert path not in {_mount_path(entry) for entry in service.get("secrets", [])}, path
    assert ("DECISIONFLOW_CREDENTIALS_FILE" in service.get("environment", {})) == (
        name in {"receiver", "orchestrator-1", "orchestrator-2"}
    )


def _mount_path(entry: str | dict[str, str]) -> str:
    target = entry if isinstance(entry, str) else entry.get("target", entry["source"])
    return target if target.startswith("/") else f"/run/secrets/{target}"


def _tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def _local(made: MadeSecrets, service: str, *, skip: tuple[str, ...] = ()) -> dict[str, str]:
    # The service's compose environment, its mounted secrets mapped to the local files it mounts;
    # settings naming compose hosts (skip) are left out.
    environment = COMPOSE["services"][service]["environment"]
    return {key: made.local(service, str(value)) for key, value in environment.items() if key not in skip}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make the secrets")
def test_compose_secrets_run_the_topology_over_tls(tmp_path: Path) -> None:
    """The README's make-secrets line + the compose environment, each service given only the files
    it mounts: receiver, orchestrator, client commands and the reconciler all talk TLS with bearer
    tokens; plaintext is refused."""
    for directory in world_traversable_directory():
        made = make_secrets_as_documented(directory)
        _run_the_topology(made, tmp_path)


def _run_the_topology(made: MadeSecrets, tmp_path: Path) -> None:
    secrets = made.folder
    # The compose metrics ports are fixed and bind every interface; here the services serve none.
    metrics = tuple(f"DECISIONFLOW_{s}_METRICS_{k}" for s in ("RECEIVER", "ORCHESTRATOR") for k in ("PORT", "ADDRESS"))
    hosts = (
        "DECISIONFLOW_RECEIVER_ADDRESS",
        "DECISIONFLOW_ORCHESTRATOR_ADDRESS",
        "DECISIONFLOW_RECEIVER_TARGET",
        *metrics,
    )
    local_database = ("DECISIONFLOW_RECEIVER_DATABASE_URL_FILE", "DECISIONFLOW_ORCHESTRATOR_DATABASE_URL_FILE")
    receiver = spawn(
        "effect_receiver.main",
        ["--address", "127.0.0.1:0", "--database-url", f"sqlite:///{tmp_path / 'receiver.db'}"],
        tmp_path,
        "receiver",
        env=_local(made, "receiver", skip=hosts + local_database),
    )
    orchestrator = None
    try:
        orchestrator_env = _local(made, "orchestrator-1", skip=hosts + local_database)
        # The published checkpoints in a folder here, signed every half second rather than every 10 s.
        published = tmp_path / "audit-publish"
        orchestrator_env.update(
            DECISIONFLOW_RECEIVER_TARGET=f"localhost:{receiver.port}",
            DECISIONFLOW_AUDIT_PUBLISH_DIR=str(published),
            DECISIONFLOW_AUDIT_INTERVAL_SECONDS="0.5",
        )
        assert orchestrator_env["DECISIONFLOW_AUDIT_SIGNING_KEY_FILE"].startswith(str(secrets))
        orchestrator = spawn(
            "orchestrator.main",
            ["--address", "127.0.0.1:0", "--database-url", f"sqlite:///{tmp_path / 'orchestrator.db'}"],
            tmp_path,
            "orchestrator",
            env=orchestrator_env,
        )
        health = [made.local("receiver", a) for a in COMPOSE["services"]["receiver"]["healthcheck"]["test"][1:]]
        health = [a.replace("localhost:50061", f"localhost:{receiver.port}") for a in health]
        checked = _run([_tool(health[0]), *health[1:]])
        assert checked.returncode == 0 and checked.stdout.strip() == "SERVING", checked.stderr
        ca = str(secrets / "ca.pem")
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
        monitor = _monitor(made, tmp_path, published / "checkpoint", f"localhost:{orchestrator.port}")
        nothing_yet = _run(monitor)  # an empty log has no checkpoint: nothing is published before the first event
        assert nothing_yet.returncode == 0 and "no checkpoint is published yet" in nothing_yet.stderr, nothing_yet
        assert not (tmp_path / "audit-monitor" / "checkpoint").exists()
        started = _run([*client, "start", str(proposal), *common, "--token-file", str(secrets / "author.token")])
        assert started.returncode == 0, started.stderr
        op = json.loads(started.stdout)["operation_id"]
        first = _published_size(published, above=0)
        kept = _run(monitor)
        assert kept.returncode == 0 and "the first one seen" in kept.stderr, kept.stderr
        approved = _run([*client, "approve", op, *common, "--token-file", str(secrets / "reviewer.token")])
        assert approved.returncode == 0, approved.stderr
        assert json.loads(approved.stdout)["state"] == "COMMITTED"
        refused = _run([*client, "approve", op, *common])  # no token
        assert refused.returncode == 3
        # The log grew: the monitor asks for the consistency proof with its auditor token and keeps the new one.
        grown = _published_size(published, above=first)
        checked = _run(monitor)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"checkpoint {grown} extends checkpoint {first}" in checked.stderr, checked.stderr

        reconciler_env = _local(made, "reconciler")
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
                "--orchestrator-token-file",
                reconciler_env["DECISIONFLOW_RECONCILER_ORCHESTRATOR_TOKEN_FILE"],
                "--receiver-token-file",
                reconciler_env["DECISIONFLOW_RECONCILER_RECEIVER_TOKEN_FILE"],
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


def _monitor(made: MadeSecrets, tmp_path: Path, checkpoint: Path, target: str) -> list[str]:
    """The audit monitor's compose command once (no --every), its mounted secrets and volume mapped here:
    it reads the published file for the orchestrator's /checkpoint and calls target."""
    command = COMPOSE["services"]["audit-monitor"]["command"]
    url, state = _flag(command, "--checkpoint"), _flag(command, "--state")
    (tmp_path / "audit-monitor").mkdir()
    mapped = {url: str(checkpoint), state: str(tmp_path / "audit-monitor" / Path(state).name)}
    mapped[_flag(command, "--target")] = target
    argv = [mapped.get(word, made.local("audit-monitor", word)) for word in command]
    every = argv.index("--every")
    return [_tool(argv[0]), *argv[1:every], *argv[every + 2 :]]


def _published_size(published: Path, *, above: int) -> int:
    """The size of the checkpoint published in the folder once it is larger than above (within 30 s)."""
    from orchestrator.audit.publication import CheckpointDirectory

    directory = CheckpointDirectory(published)
    deadline = time.monotonic() + 30
    while (note := directory.latest()) is None or note.checkpoint.size <= above:
        assert time.monotonic() < deadline, f"no checkpoint larger than {above} published in {published}"
        time.sleep(0.2)
    return note.checkpoint.size


def _answers_to(service: dict[str, Any], name: str) -> set[str]:
    """The names a compose service answers to on the default network: its own and its aliases there."""
    networks = service.get("networks", {"default": {}})
    assert isinstance(networks, dict) and "default" in networks, "on the default network"
    return {name, *((networks["default"] or {}).get("aliases", []))}


def _orchestrator_target(service: dict[str, Any]) -> tuple[str, int]:
    target = str(service["environment"]["DECISIONFLOW_ORCHESTRATOR_TARGET"])
    return split_host_port(check_address(target))


@pytest.mark.parametrize("caller", ["reconciler", "console"])
def test_the_reconciler_and_the_console_call_both_orchestrators_through_one_name(caller: str) -> None:
    """Their target's name resolves to every orchestrator (a network alias both carry), so the client's
    round_robin keeps a connection to each and calls the one that is up: the second orchestrator is
    their failover. (That the project's clients spread calls over a name's addresses:
    tests/client/test_client_channels.py.)"""
    service = CONSOLE if caller == "console" else COMPOSE["services"][caller]
    host, port = _orchestrator_target(service)
    orchestrators = {name: s for name, s in COMPOSE["services"].items() if s.get("command", [""])[0] == _ORCHESTRATOR}
    assert set(orchestrators) == {"orchestrator-1", "orchestrator-2"}
    answering = {name for name, s in COMPOSE["services"].items() if host in _answers_to(s, name)}
    assert answering == set(orchestrators), f"{caller} calls {host}, which only {sorted(answering)} answer to"
    for name, orchestrator in orchestrators.items():
        assert orchestrator["environment"]["DECISIONFLOW_ORCHESTRATOR_ADDRESS"] == f"0.0.0.0:{port}", name
    assert "networks" not in service, "the caller is on the default network"
    assert set(service["depends_on"]) == set(orchestrators)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make the secrets")
def test_both_orchestrator_certificates_name_the_host_their_callers_dial() -> None:
    host, _ = _orchestrator_target(COMPOSE["services"]["reconciler"])
    for directory in world_traversable_directory():
        made = make_secrets_as_documented(directory)
        for name in ("orchestrator-1", "orchestrator-2"):
            mounted = made.mounts(name)
            certificate, ca = mounted["/run/secrets/server.pem"], mounted["/run/secrets/ca.pem"]
            argv = ["openssl", "verify", "-CAfile", str(ca), "-purpose", "sslserver", "-verify_hostname", host]
            verified = _run([*argv, str(certificate)])
            assert verified.returncode == 0, (name, verified.stdout, verified.stderr)
        receiver = made.mounts("receiver")["/run/secrets/server.pem"]
        argv = ["openssl", "verify", "-CAfile", str(made.folder / "ca.pem"), "-verify_hostname", host, str(receiver)]
        assert _run(argv).returncode != 0


# docker-compose.console.yml: the review console, added on top of docker-compose.yml only when named.
CONSOLE_FILE = ROOT / "docker-compose.console.yml"
CONSOLE_COMPOSE = yaml.safe_load(CONSOLE_FILE.read_text())
CONSOLE = CONSOLE_COMPOSE["services"]["console"]
OIDC_FOR_ORCHESTRATORS = {"DECISIONFLOW_OIDC_ISSUER", "DECISIONFLOW_OIDC_AUDIENCE", "DECISIONFLOW_OIDC_ROLE_MAP"}


def _required(value: str) -> str:
    """The variable a ${VAR:?message} value requires (fails the test for any other form)."""
    found = re.fullmatch(r"\$\{(\w+):\?[^}]+\}", value)
    assert found, f"{value!r} is not a required ${{VAR:?message}}"
    return found[1]


def test_the_console_file_adds_the_console_and_the_orchestrators_provider_settings_only() -> None:
    services = CONSOLE_COMPOSE["services"]
    assert set(services) == {"console", "orchestrator-1", "orchestrator-2"}
    assert set(CONSOLE_COMPOSE) <= COMPOSE_V2_TOP_LEVEL
    known = {s.env for s in ORCHESTRATOR_SETTINGS if not s.flag_only}
    issuer = _required(CONSOLE["environment"]["DECISIONFLOW_CONSOLE_OIDC_ISSUER"])
    for name in ("orchestrator-1", "orchestrator-2"):
        assert set(services[name]) == {"environment"}, "only settings are added to the orchestrators"
        environment = services[name]["environment"]
        assert set(environment) == OIDC_FOR_ORCHESTRATORS and known >= OIDC_FOR_ORCHESTRATORS
        # The orchestrators accept tokens of the issuer the console signs people in at, and nothing is defaulted.
        assert _required(environment["DECISIONFLOW_OIDC_ISSUER"]) == issuer
        for value in environment.values():
            _required(value)
        assert not OIDC_FOR_ORCHESTRATORS & set(COMPOSE["services"][name]["environment"])
    assert "console" not in COMPOSE["services"], "the default stack starts without a provider"


def test_the_console_mounts_its_two_secrets_and_nothing_else() -> None:
    assert {entry["source"] for entry in CONSOLE["secrets"]} == {"console_client_secret", "console_session_key"}
    files = {CONSOLE_COMPOSE["secrets"][entry["source"]]["file"] for entry in CONSOLE["secrets"]}
    assert files == {"./deploy/secrets/console-client-secret", "./deploy/secrets/console-session.key"}
    # The CA certificate and the audit log's verifier key are public: configs, read to verify the
    # orchestrator's TLS and the log's checkpoints.
    configs = {CONSOLE_COMPOSE["configs"][config["source"]]["file"]: config["target"] for config in CONSOLE["configs"]}
    assert configs == {
        "./deploy/secrets/ca.pem": "/etc/decisionflow/ca.pem",
        "./deploy/secrets/audit-log.vkey": "/etc/decisionflow/audit-log.vkey",
    }
    assert "volumes" not in CONSOLE and "env_file" not in CONSOLE
    environment = CONSOLE["environment"]
    private = re.compile("DATABASE|CREDENTIALS|TOKEN|CHECKPOINT|SIGNING")
    assert not [k for k in environment if private.search(k)], environment
    assert environment["DECISIONFLOW_CONSOLE_AUDIT_LOG_KEY_FILE"] == "/etc/decisionflow/audit-log.vkey"
    mounted = {_mount_path(entry) for entry in CONSOLE["secrets"]} | set(configs.values())
    named = {v for v in environment.values() if isinstance(v, str) and v.startswith(("/run/", "/etc/"))}
    assert named == mounted
    assert environment["DECISIONFLOW_CONSOLE_OIDC_CLIENT_SECRET_FILE"] == "/run/secrets/console-client-secret"
    assert environment["DECISIONFLOW_CONSOLE_SESSION_KEY_FILE"] == "/run/secrets/console-session.key"


def test_the_console_is_published_on_loopback_checked_on_healthz_and_runs_as_the_image_user() -> None:
    from decisionflow_console.config import SETTINGS as CONSOLE_SETTINGS

    assert CONSOLE["ports"] == ["127.0.0.1:8080:8080"]
    assert CONSOLE["environment"]["DECISIONFLOW_CONSOLE_ADDRESS"] == "0.0.0.0:8080"
    assert CONSOLE["healthcheck"]["test"] == [
        "CMD",
        "decisionflow",
        "health",
        "--http",
        "http://127.0.0.1:8080/healthz",
    ]
    assert CONSOLE["command"] == ["decisionflow-console"]
    known = {s.env for s in CONSOLE_SETTINGS if not s.flag_only}
    assert set(CONSOLE["environment"]) <= known, set(CONSOLE["environment"]) - known
    _required(CONSOLE["environment"]["DECISIONFLOW_CONSOLE_OIDC_CLIENT_ID"])
    # The same image and user as the other services: no user override, the image's USER, the secrets' group.
    ours = COMPOSE["x-decisionflow"]
    assert "user" not in CONSOLE and "user" not in ours
    assert (CONSOLE["build"], CONSOLE["image"], CONSOLE["group_add"]) == (
        ours["build"],
        ours["image"],
        ours["group_add"],
    )
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "\nUSER 10001:10001\n" in dockerfile


def test_the_image_installs_the_console_and_never_the_trial_provider() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    [install] = [line for line in dockerfile.splitlines() if line.startswith("RUN pip install")]
    assert "'.[console]'" in install and "trial" not in install
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {extra: {re.split("[=<>\\[]", pin)[0] for pin in pins} for extra, pins in extras.items()}
    assert {"starlette", "uvicorn", "authlib"} <= names["console"]
    assert "oidc-provider-mock" in names["trial"] and "oidc-provider-mock" not in names["console"]
    assert "'.[dev,console,trial]'" in (ROOT / "Makefile").read_text()


def _interpolated(value: str, variables: dict[str, str]) -> str:
    """value with compose's ${VAR:?message} and ${VAR:-default} replaced from variables (else the default)."""

    def one(found: re.Match[str]) -> str:
        name, operator, rest = found[1], found[2], found[3]
        return variables.get(name, rest if operator == ":-" else "")

    return re.sub(r"\$\{(\w+)(:\?|:-)([^}]*)\}", one, value)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make the secrets")
def test_the_console_starts_from_its_compose_files_alone_and_its_healthcheck_passes(tmp_path: Path) -> None:
    """The console given only its compose environment, its two secrets and the CA config (the
    provider's client secret written in as docs/deployment.md says) starts and answers its healthcheck."""
    for directory in world_traversable_directory():
        made = make_secrets_as_documented(directory)
        (made.folder / "console-client-secret").write_text("issued-by-the-provider\n")
        variables = {
            "DECISIONFLOW_CONSOLE_OIDC_ISSUER": "https://id.example.com",
            "DECISIONFLOW_CONSOLE_OIDC_CLIENT_ID": "x",
        }
        mounts = {
            _mount_path(e): made.clone / CONSOLE_COMPOSE["secrets"][e["source"]]["file"] for e in CONSOLE["secrets"]
        }
        mounts |= {
            c["target"]: made.clone / CONSOLE_COMPOSE["configs"][c["source"]]["file"] for c in CONSOLE["configs"]
        }
        environment = {key: _interpolated(str(value), variables) for key, value in CONSOLE["environment"].items()}
        environment = {key: str(mounts.get(value, value)) for key, value in environment.items()}
        environment["DECISIONFLOW_CONSOLE_ADDRESS"] = "127.0.0.1:0"  # the container's 0.0.0.0:8080, here a free port
        console = spawn("decisionflow_console.main", [], tmp_path, "console", env=environment)
        try:
            health = [a.replace(":8080/", f":{console.port}/") for a in CONSOLE["healthcheck"]["test"][1:]]
            checked = _run([_tool(health[0]), *health[1:]])
            assert checked.returncode == 0, checked.stderr
        finally:
            assert console.stop() == 0


HARDENING = {"read_only": True, "cap_drop": ["ALL"]}


PUBLISH_DIR = "/var/lib/decisionflow/audit-publish"
MONITOR_DIR = "/var/lib/decisionflow/audit-monitor"
RELAY_DIR = "/var/lib/decisionflow/relay"
# The only writable paths of the decisionflow containers: named volumes, each mounted read-write where the
# image has a directory of its user's.
WRITABLE = {
    "orchestrator-1": [f"audit-publish:{PUBLISH_DIR}"],
    "orchestrator-2": [f"audit-publish:{PUBLISH_DIR}"],
    "audit-monitor": [f"audit-monitor:{MONITOR_DIR}"],
    "relay": [f"relay:{RELAY_DIR}"],
}


@pytest.mark.parametrize("name", [*OURS, "console"])
def test_every_decisionflow_container_runs_as_its_pod_does(name: str) -> None:
    """A read-only root, no capabilities, no privilege escalation, as the Kubernetes pods'
    securityContext; the only writable paths are the audit log's named volumes (WRITABLE)."""
    service = CONSOLE if name == "console" else COMPOSE["services"][name]
    assert {key: service.get(key) for key in HARDENING} == HARDENING, name
    assert "no-new-privileges:true" in service.get("security_opt", []), name
    assert "privileged" not in service and "cap_add" not in service, name
    secrets_read_only = secret_folders(service)  # each read-only
    volumes = [volume for volume in service.get("volumes", []) if volume.split(":")[0] not in secrets_read_only]
    assert volumes == WRITABLE.get(name, []), name


def test_the_writable_volumes_are_named_and_owned_by_the_image_user() -> None:
    """Both orchestrators publish to one named volume, the monitor keeps its state on another, the relay its
    cursor on a third; each mount point is a directory the Dockerfile makes, owned by the USER the containers
    run as, so a fresh named volume (which takes its mount point's owner and mode) is writable by that user."""
    declared = {volume.split(":")[0] for volumes in WRITABLE.values() for volume in volumes}
    assert declared <= set(COMPOSE["volumes"]), "named volumes, not bind mounts"
    dockerfile = (ROOT / "Dockerfile").read_text()
    [user] = re.findall(r"^USER (\d+):(\d+)$", dockerfile, flags=re.MULTILINE)
    [made] = re.findall(r"install -d -o (\d+) -g (\d+) -m (0\d+) (.+)$", dockerfile, flags=re.MULTILINE)
    assert (made[0], made[1]) == user and made[2] == "0755"
    assert set(made[3].split()) == {PUBLISH_DIR, MONITOR_DIR, RELAY_DIR}
    for name in ("orchestrator-1", "orchestrator-2"):
        assert COMPOSE["services"][name]["environment"]["DECISIONFLOW_AUDIT_PUBLISH_DIR"] == PUBLISH_DIR


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_audit_monitor_watches_what_both_orchestrators_publish() -> None:
    """The monitor fetches /checkpoint from the metrics port both orchestrators serve under the alias it
    resolves to, asks their gRPC port for proofs with its own token (role auditor: test_make_secrets.py),
    checks signatures with the verifier key, keeps its state on its volume, and runs until a fork."""
    monitor = COMPOSE["services"]["audit-monitor"]
    command = monitor["command"]
    assert command[:3] == ["decisionflow", "audit", "monitor"] and float(_flag(command, "--every")) > 0
    orchestrators = {name: COMPOSE["services"][name] for name in ("orchestrator-1", "orchestrator-2")}
    url = _flag(command, "--checkpoint")
    found = re.fullmatch(r"http://([\w-]+):(\d+)/checkpoint", url)
    assert found, url
    for name, orchestrator in orchestrators.items():
        assert found[1] in _answers_to(orchestrator, name), (name, url)
        assert orchestrator["environment"]["DECISIONFLOW_ORCHESTRATOR_METRICS_PORT"] == found[2], name
    host, port = split_host_port(check_address(_flag(command, "--target")))
    for name, orchestrator in orchestrators.items():
        assert (
            host in _answers_to(orchestrator, name)
            and orchestrator["environment"]["DECISIONFLOW_ORCHESTRATOR_ADDRESS"] == f"0.0.0.0:{port}"
        ), name
    assert Path(_flag(command, "--state")).parent == Path(MONITOR_DIR)
    secrets = {entry["source"]: _mount_path(entry) for entry in monitor["secrets"]}
    assert secrets == {
        "ca_pem": _flag(command, "--ca-file"),
        "audit_log_vkey": _flag(command, "--public-key"),
        "audit_monitor_token": _flag(command, "--token-file"),
    }
    assert COMPOSE["secrets"]["audit_monitor_token"]["file"] == "./deploy/secrets/audit-monitor.token"
    assert COMPOSE["secrets"]["audit_log_vkey"]["file"] == "./deploy/secrets/audit-log.vkey"
    assert set(monitor["depends_on"]) == set(orchestrators)
    # Its healthcheck: the monitor once on its own state (the same checkpoint: no call, nothing written).
    check = monitor["healthcheck"]["test"][1:]
    assert check[:3] == command[:3] and "--every" not in check
    assert _flag(check, "--checkpoint") == _flag(check, "--state") == _flag(command, "--state")
    assert _flag(check, "--public-key") == _flag(command, "--public-key")


def test_the_relay_watches_both_orchestrators_and_publishes_into_the_nats_service() -> None:
    """The relay dials the name both orchestrators answer to with the CA and its own token (role auditor:
    test_make_secrets.py), publishes to the nats service's client port, keeps its cursor on its own named
    volume, is never scaled (one relay per cursor file), and waits for the orchestrators and NATS."""
    relay = COMPOSE["services"]["relay"]
    environment = relay["environment"]
    assert relay["command"] == ["decisionflow-relay"]
    host, port = split_host_port(check_address(environment["DECISIONFLOW_ORCHESTRATOR_TARGET"]))
    orchestrators = {name: COMPOSE["services"][name] for name in ("orchestrator-1", "orchestrator-2")}
    for name, orchestrator in orchestrators.items():
        assert host in _answers_to(orchestrator, name), name
        assert orchestrator["environment"]["DECISIONFLOW_ORCHESTRATOR_ADDRESS"] == f"0.0.0.0:{port}", name
    secrets = {entry["source"]: _mount_path(entry) for entry in relay["secrets"]}
    assert secrets == {
        "ca_pem": environment["DECISIONFLOW_ORCHESTRATOR_CA_FILE"],
        "relay_token": environment["DECISIONFLOW_RELAY_TOKEN_FILE"],
    }
    assert COMPOSE["secrets"]["relay_token"]["file"] == "./deploy/secrets/relay.token"
    assert Path(environment["DECISIONFLOW_RELAY_CURSOR_FILE"]).parent == Path(RELAY_DIR)
    assert "deploy" not in relay and "scale" not in relay, "one relay per cursor file"
    assert environment["DECISIONFLOW_RELAY_NATS_URL"] == "nats://nats:4222"
    assert set(relay["depends_on"]) == {*orchestrators, "nats"}
    assert all(condition == {"condition": "service_healthy"} for condition in relay["depends_on"].values())
    # The stream's replicas are no more than the NATS servers there are: one here.
    assert environment["DECISIONFLOW_RELAY_STREAM_REPLICAS"] == "1"


def test_the_nats_service_runs_jetstream_on_a_named_volume() -> None:
    nats = COMPOSE["services"]["nats"]
    command = nats["command"]
    assert "--jetstream" in command
    store = _flag(command, "--store_dir")
    assert [volume.split(":") for volume in nats["volumes"]] == [["nats-data", store]]
    assert "nats-data" in COMPOSE["volumes"]
    # Reached on the compose network only; its healthcheck asks the monitoring port the command opens.
    assert "ports" not in nats
    assert f"http://127.0.0.1:{_flag(command, '--http_port')}/healthz" in nats["healthcheck"]["test"]
    repository, _, tag = nats["image"].partition(":")
    assert repository == "nats" and tag and tag != "latest"
