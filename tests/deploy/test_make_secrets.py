"""deploy/make-secrets.sh as a new user runs it: the README's line in a fresh copy of the repository,
with the virtual environment not on PATH. Each service gets only what it needs, the containers'
user (uid 10001) reads its files through the group and nothing private is world-readable."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from decisionflow.transparency import NoteVerifier, open_checkpoint
from decisionflow_server.runtime.auth import load_credentials, token_sha256
from orchestrator.audit_log.signing import DEFAULT_ORIGIN, CheckpointSigner, signing_key
from tests.deploy.made import (
    COMPOSE,
    MadeSecrets,
    copy_repository,
    make_secrets_as_documented,
    mode,
    run_make_secrets,
    world_traversable_directory,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make the secrets"),
]
CONTAINER_UID = "10001"
OURS = sorted(name for name, service in COMPOSE["services"].items() if "build" in service)
RELOADING = ("receiver", "orchestrator-1", "orchestrator-2")  # the servers that read their credentials on SIGHUP


@pytest.fixture(scope="module")
def made() -> Iterator[MadeSecrets]:
    """The README's make-secrets line, run once in a copy of the repository."""
    for directory in world_traversable_directory():
        yield make_secrets_as_documented(directory)


def _principal_roles(made: MadeSecrets, token_name: str, service: str) -> set[str]:
    credentials = load_credentials(made.folder / f"{service}-credentials" / "credentials.json")
    digest = token_sha256((made.folder / token_name).read_text().strip())
    return {role.value for entry in credentials.tokens if entry.sha256 == digest for role in entry.roles}


def test_the_readme_line_writes_every_mounted_secret_and_the_group_into_env(made: MadeSecrets) -> None:
    for name in COMPOSE["services"]:
        for path, file in made.mounts(name).items():
            assert file.is_file(), f"{name} mounts {path} from {file}, which make-secrets.sh did not write"
    assert f"DECISIONFLOW_SECRETS_GID={os.getgid()}" in (made.clone / ".env").read_text().splitlines()
    assert not list(made.folder.parent.glob(".secrets.*")), "a temporary folder was left behind"


def test_least_privilege_mounts(made: MadeSecrets) -> None:
    mounted = {name: {file.name for file in made.mounts(name).values()} for name in COMPOSE["services"]}
    everything = set().union(*mounted.values())
    assert "ca.key" not in everything and not any("/ca/" in str(f) for n in mounted for f in made.mounts(n).values())
    assert {"author.token", "reviewer.token"}.isdisjoint(everything)
    receiver = {"receiver.pem", "receiver.key", "credentials.json", "ca.pem", "receiver-database.url"}
    assert mounted["receiver"] == receiver
    # Each credentials file in a folder of its own (mounted whole, so a replaced file shows): nothing else in it.
    credentials = {name: made.mounts(name)["/run/secrets/credentials/credentials.json"] for name in RELOADING}
    for name, file in credentials.items():
        service = "receiver" if name == "receiver" else "orchestrator"
        assert file == made.folder / f"{service}-credentials" / "credentials.json", (name, file)
        assert [f.name for f in file.parent.iterdir()] == ["credentials.json"], name
    for name in ("orchestrator-1", "orchestrator-2"):
        assert "checkpoint.keys" in mounted[name] and "orchestrator.token" in mounted[name]
        assert "receiver-database.url" not in mounted[name]
        assert {f for f in mounted[name] if f.endswith(".token")} == {"orchestrator.token"}
    assert mounted["reconciler"] == {"ca.pem", "reconciler-orchestrator.token", "reconciler-receiver.token"}
    # The audit monitor: its own token, the verifier key (public) and the CA; no signing key, no credentials.
    assert mounted["audit-monitor"] == {"ca.pem", "audit-log.vkey", "audit-monitor.token"}
    # The relay: its own token and the CA; it watches, so nothing else.
    assert mounted["relay"] == {"ca.pem", "relay.token"}
    assert all("checkpoint.keys" not in mounted[name] for name in ("receiver", "reconciler", "postgres"))
    # The audit log's signing key is the orchestrators' alone.
    assert {name for name in mounted if "audit-signing.key" in mounted[name]} == {"orchestrator-1", "orchestrator-2"}
    assert (made.folder / "ca" / "ca.key").is_file()


def test_the_audit_log_key_signs_checkpoints_its_verifier_key_opens(made: MadeSecrets) -> None:
    signer = CheckpointSigner(DEFAULT_ORIGIN, signing_key((made.folder / "audit-signing.key").read_text().strip()))
    vkey = (made.folder / "audit-log.vkey").read_text().strip()
    assert vkey == signer.vkey and vkey.startswith(f"{DEFAULT_ORIGIN}+")
    checkpoint = open_checkpoint(signer.sign(3, bytes(32)), [NoteVerifier.from_vkey(vkey)], origin=DEFAULT_ORIGIN)
    assert (checkpoint.size, checkpoint.root_hash) == (3, bytes(32))


def test_tokens_carry_only_the_roles_each_caller_needs(made: MadeSecrets) -> None:
    assert _principal_roles(made, "orchestrator.token", "receiver") == {"effect_writer"}
    assert _principal_roles(made, "reconciler-receiver.token", "receiver") == {"effect_reader"}
    assert _principal_roles(made, "reconciler-orchestrator.token", "orchestrator") == {"operator"}
    assert _principal_roles(made, "audit-monitor.token", "orchestrator") == {"auditor"}
    assert _principal_roles(made, "relay.token", "orchestrator") == {"auditor"}
    assert _principal_roles(made, "author.token", "orchestrator") == {"author"}
    assert _principal_roles(made, "reviewer.token", "orchestrator") == {"reviewer"}


def test_each_service_accepts_only_the_tokens_that_call_it(made: MadeSecrets) -> None:
    # A service sees every token presented to it: none it receives may be accepted by the other.
    accepted = {
        service: {token.name for token in made.folder.glob("*.token") if _principal_roles(made, token.name, service)}
        for service in ("receiver", "orchestrator")
    }
    assert accepted["receiver"] == {"orchestrator.token", "reconciler-receiver.token"}
    assert accepted["orchestrator"] == {
        "reconciler-orchestrator.token",
        "audit-monitor.token",
        "relay.token",
        "author.token",
        "reviewer.token",
    }


@pytest.mark.parametrize("name", ["receiver", "orchestrator-1", "orchestrator-2", "orchestrator"])
def test_each_service_has_its_own_server_certificate(made: MadeSecrets, name: str) -> None:
    certificate = x509.load_pem_x509_certificate((made.folder / f"{name}.pem").read_bytes())
    usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert name in names.get_values_for_type(x509.DNSName)
    # Compose's replicas also answer to the alias "orchestrator" they share (docker-compose.yml).
    shared = {"orchestrator"} if name.startswith("orchestrator-") else set()
    others = {"receiver", "orchestrator-1", "orchestrator-2", "orchestrator"} - {name} - shared
    assert others.isdisjoint(names.get_values_for_type(x509.DNSName))
    assert shared <= set(names.get_values_for_type(x509.DNSName))
    constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca is False


def test_nothing_private_is_readable_by_others(made: MadeSecrets) -> None:
    paths = [made.folder, *made.folder.rglob("*")]
    for path in paths:
        assert mode(path) & 0o007 == 0, f"{path} is {oct(mode(path))}"
        assert path.stat().st_uid == os.getuid() and path.stat().st_gid == os.getgid()
    assert {mode(p) for p in paths if p.is_file() and p.parent.name != "ca"} == {0o640}
    assert {mode(p) for p in paths if p.is_dir() and p.name != "ca"} == {0o750}
    assert mode(made.folder / "ca") == 0o700 and mode(made.folder / "ca" / "ca.key") == 0o600


def _read_as_container_user(path: Path, *, with_group: bool) -> subprocess.CompletedProcess[bytes]:
    groups = ["--groups", str(os.getgid())] if with_group else ["--clear-groups"]
    argv = ["setpriv", "--reuid", CONTAINER_UID, "--regid", CONTAINER_UID, *groups, "cat", str(path)]
    return subprocess.run(argv, capture_output=True, timeout=30, check=False)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
@pytest.mark.parametrize("name", sorted(COMPOSE["services"]))
def test_the_container_user_reads_its_mounts_only_through_the_group(made: MadeSecrets, name: str) -> None:
    mounts = made.mounts(name)
    assert mounts or name not in OURS
    for path, file in mounts.items():
        read = _read_as_container_user(file, with_group=True)
        assert read.returncode == 0 and read.stdout == file.read_bytes(), (name, path, read.stderr)
        refused = _read_as_container_user(file, with_group=False)
        assert refused.returncode != 0 and b"Permission denied" in refused.stderr, (name, path)
    ca_key = _read_as_container_user(made.folder / "ca" / "ca.key", with_group=True)
    assert ca_key.returncode != 0


def test_runs_from_another_directory_and_a_failure_leaves_no_folder(tmp_path: Path) -> None:
    clone = copy_repository(tmp_path / "clone")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    failed = run_make_secrets(clone, extra_env={"DECISIONFLOW": "false"})
    assert failed.returncode != 0
    assert not (clone / "deploy" / "secrets").exists()
    assert sorted(p.name for p in (clone / "deploy").iterdir()) == sorted(
        p.name for p in (Path(__file__).resolve().parents[2] / "deploy").iterdir() if p.name != "secrets"
    )
    done = subprocess.run(
        ["bash", str(clone / "deploy" / "make-secrets.sh"), "out"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    for service in ("receiver", "orchestrator"):
        assert json.loads((elsewhere / "out" / f"{service}-credentials" / "credentials.json").read_text())["tokens"]
    again = run_make_secrets(clone, str(elsewhere / "out"))
    assert again.returncode == 1 and "already exists" in again.stderr


def test_the_console_secrets_are_written_and_the_client_secret_waits_for_the_provider(made: MadeSecrets) -> None:
    console = yaml.safe_load((made.clone / "docker-compose.console.yml").read_text())
    files = [entry["file"] for kind in ("secrets", "configs") for entry in console[kind].values()]
    for file in files:
        assert (made.clone / file).is_file(), f"docker-compose.console.yml mounts {file}, which was not written"
    session_key = made.folder / "console-session.key"
    assert re.fullmatch(r"[0-9a-f]{64}\n", session_key.read_text()), "32 random bytes, as hex"
    # Empty until the provider's secret is written into it: the console refuses to start with an empty one.
    client_secret = made.folder / "console-client-secret"
    assert client_secret.read_bytes() == b""
    assert mode(session_key) == mode(client_secret) == 0o640
    assert session_key.stat().st_gid == client_secret.stat().st_gid == os.getgid()
