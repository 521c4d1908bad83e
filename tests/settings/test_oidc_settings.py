"""The OIDC settings: off unless issuer and audience are both given, URLs only over https (or http on
loopback), the role map's form, and OIDC counting as authentication for listening beyond loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from decisionflow.tls import channel_credentials
from decisionflow_server.runtime.auth import OidcConfig, Role
from decisionflow_server.runtime.server_security import ServerSecurity, provider_url, role_map
from effect_receiver.config import ReceiverConfig
from effect_receiver.config import load as load_receiver
from effect_receiver.main import create_server as create_receiver
from orchestrator.config import load as load_orchestrator
from tests.security.pki import Pki, make_pki

ISSUER = "https://login.example.com/realms/decisionflow"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA and a localhost server certificate."""
    return make_pki(tmp_path_factory.mktemp("pki"), ())


def test_both_services_read_the_oidc_settings_from_flags_and_environment() -> None:
    environ = {
        "DECISIONFLOW_OIDC_ISSUER": ISSUER,
        "DECISIONFLOW_OIDC_AUDIENCE": "decisionflow",
        "DECISIONFLOW_OIDC_ROLE_MAP": "reviewers=reviewer, leads=reviewer,leads=author",
        "DECISIONFLOW_OIDC_GROUPS_CLAIM": "team_ids",
        "DECISIONFLOW_CHECKPOINT_KEYS": "k" * 32,
    }
    flags = ["--oidc-subject-claim", "email", "--oidc-leeway-seconds", "30"]
    expected = OidcConfig(
        ISSUER,
        "decisionflow",
        role_map=(("reviewers", frozenset({Role.REVIEWER})), ("leads", frozenset({Role.REVIEWER, Role.AUTHOR}))),
        groups_claim="team_ids",
        subject_claim="email",
        leeway_seconds=30.0,
    )

    assert load_orchestrator(flags, environ).security.oidc == expected
    assert load_receiver(flags, environ).security.oidc == expected
    assert load_receiver([], {}).security.oidc is None
    # Unset, the groups come from the claim the roles come from by default: Keycloak's and Entra ID's "groups".
    defaults = load_receiver(["--oidc-issuer", ISSUER, "--oidc-audience", "decisionflow"], {}).security.oidc
    assert defaults is not None and (defaults.groups_claim, defaults.roles_claim) == ("groups", "groups")
    flagged = load_receiver(
        ["--oidc-issuer", ISSUER, "--oidc-audience", "decisionflow", "--oidc-groups-claim", "g"], {}
    )
    assert flagged.security.oidc is not None and flagged.security.oidc.groups_claim == "g"


@pytest.mark.parametrize("argv", [["--oidc-issuer", ISSUER], ["--oidc-audience", "decisionflow"]])
def test_issuer_and_audience_go_together(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        load_receiver(argv, {})
    assert usage.value.code == 2
    assert "--oidc-issuer (env DECISIONFLOW_OIDC_ISSUER) and --oidc-audience" in capsys.readouterr().err


@pytest.mark.parametrize("url", [ISSUER, "http://127.0.0.1:8080", "http://localhost:9000/realms/x", "http://[::1]:1"])
def test_provider_urls_are_https_or_loopback_http(url: str) -> None:
    assert provider_url(url) == url


@pytest.mark.parametrize("url", ["http://login.example.com", "ftp://127.0.0.1/", "login.example.com", "https://"])
def test_other_provider_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="https://"):
        provider_url(url)


@pytest.mark.parametrize(("text", "message"), [("reviewers", "group=role"), ("reviewers=judge", "unknown role")])
def test_a_malformed_role_map_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        role_map(text)


def test_a_server_with_tls_and_oidc_alone_listens_beyond_loopback(tmp_path: Path, pki: Pki) -> None:
    # The issuer's keys are out of reach: the server starts anyway and refuses tokens until they are not.
    oidc = OidcConfig("http://127.0.0.1:9", "decisionflow")
    security = ServerSecurity(tls_cert=pki.cert("server"), tls_key=pki.key("server"), oidc=oidc)
    database_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    config = ReceiverConfig(address="0.0.0.0:0", database_url=database_url, security=security)

    async def scenario() -> None:
        server = await create_receiver(config)
        try:
            async with grpc.aio.secure_channel(
                f"127.0.0.1:{server.port}", channel_credentials(pki.cert("ca"))
            ) as channel:
                answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
                assert answer.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            await server.stop(1.0)

    asyncio.run(scenario())
