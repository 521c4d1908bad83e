"""The console's configuration: each setting from its flag, else its environment variable, else its
default, parsed by the setting's own parser. Secrets (the client secret, the session key) come from
files only."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from decisionflow import addresses
from decisionflow_server.foundation import arguments, settings
from decisionflow_server.foundation.settings import Setting, SettingError, add_settings, parse_settings
from decisionflow_server.foundation.version import add_version_flag

PROGRAM = "decisionflow-console"
MIN_SESSION_KEY_BYTES = 32


def _listen_address(value: str) -> str:
    address = settings.target(value)
    if address.startswith(addresses.UNIX_SCHEMES):
        raise ValueError(f"expected host:port, not {value!r}")
    return address


def _session_key(value: str) -> bytes:
    key = value.encode()
    if len(key) < MIN_SESSION_KEY_BYTES:
        # A secret: say how long it must be, never what it is.
        raise ValueError(f"the session key must be at least {MIN_SESSION_KEY_BYTES} bytes")
    return key


def public_url(value: str) -> str:
    """Return an http(s) origin without a trailing slash (``https://console.example.com``); plain http
    is accepted only for a loopback host, since the session cookie would otherwise cross the network
    readable by anyone on the path."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL, not {value!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"expected a URL with no path, query or fragment, not {value!r}")
    if parts.scheme == "http" and not addresses.is_loopback(f"{parts.hostname}:1"):
        raise ValueError(f"plain http is for localhost only; serve {parts.hostname} behind https, not {value!r}")
    return f"{parts.scheme}://{parts.netloc}"


def issuer_url(value: str) -> str:
    """Return the provider's issuer URL (http(s), without a trailing slash)."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected the provider's http:// or https:// issuer URL, not {value!r}")
    return value.strip().rstrip("/")


ADDRESS = Setting(
    "address",
    "DECISIONFLOW_CONSOLE_ADDRESS",
    "host:port the console's HTTP server listens on (port 0 picks a free one); put it behind an https proxy",
    "127.0.0.1:8080",
    parse=_listen_address,
)
PUBLIC_URL = Setting(
    "public_url",
    "DECISIONFLOW_CONSOLE_PUBLIC_URL",
    "the console's origin as browsers reach it, such as https://review.example.com (unset: http://ADDRESS); "
    "the sign-in redirect is PUBLIC_URL/auth/callback, and https marks the session cookie Secure",
    parse=public_url,
)
ORCHESTRATOR_TARGET = Setting(
    "orchestrator_target",
    "DECISIONFLOW_ORCHESTRATOR_TARGET",
    "host:port of the orchestrator",
    "127.0.0.1:50051",
    parse=settings.target,
)
CA_FILE = Setting(
    "ca_file",
    "DECISIONFLOW_CONSOLE_CA_FILE",
    "CA bundle (PEM) of the orchestrator's certificate: call it over TLS (unset: plaintext, loopback use)",
    parse=settings.readable_file,
)
INSECURE_CLEARTEXT_TOKEN = Setting(
    "insecure_cleartext_token",
    "DECISIONFLOW_CONSOLE_INSECURE_CLEARTEXT_TOKEN",
    "true: send people's access tokens to the orchestrator without TLS even beyond loopback (anyone on the "
    "path can read and replay them); without it an orchestrator that is not localhost, 127.x or ::1 needs "
    "--ca-file",
    "false",
    parse=settings.boolean,
)
TIMEOUT_SECONDS = Setting(
    "timeout_seconds",
    "DECISIONFLOW_CONSOLE_TIMEOUT_SECONDS",
    "deadline of each call attempt to the orchestrator (transient failures are retried within the client policy)",
    "10",
    parse=settings.positive_seconds,
)
OIDC_ISSUER = Setting(
    "oidc_issuer",
    "DECISIONFLOW_CONSOLE_OIDC_ISSUER",
    "issuer URL of the OpenID provider (its /.well-known/openid-configuration is read at the first sign-in)",
    parse=issuer_url,
)
OIDC_CLIENT_ID = Setting(
    "oidc_client_id",
    "DECISIONFLOW_CONSOLE_OIDC_CLIENT_ID",
    "the console's client id at the provider",
    parse=settings.non_empty,
)
OIDC_CLIENT_SECRET_FILE = Setting(
    "oidc_client_secret_file",
    "DECISIONFLOW_CONSOLE_OIDC_CLIENT_SECRET_FILE",
    "file holding the client secret (unset: a public client, which PKCE alone protects)",
    parse=settings.from_file(settings.non_empty),
)
OIDC_SCOPES = Setting(
    "oidc_scopes",
    "DECISIONFLOW_CONSOLE_OIDC_SCOPES",
    "scopes asked for at sign-in, separated by spaces (openid is required)",
    "openid profile email",
    parse=settings.non_empty,
)
OIDC_GROUPS_CLAIM = Setting(
    "oidc_groups_claim",
    "DECISIONFLOW_CONSOLE_OIDC_GROUPS_CLAIM",
    "ID token claim listing the person's groups, shown beside their name (the orchestrator maps groups to roles)",
    "groups",
    parse=settings.non_empty,
)
SESSION_KEY_FILE = Setting(
    "session_key_file",
    "DECISIONFLOW_CONSOLE_SESSION_KEY_FILE",
    f"file holding the key that signs session cookies (at least {MIN_SESSION_KEY_BYTES} bytes; required)",
    parse=settings.from_file(_session_key),
)
SESSION_LIFETIME_SECONDS = Setting(
    "session_lifetime_seconds",
    "DECISIONFLOW_CONSOLE_SESSION_LIFETIME_SECONDS",
    "a session ends after this long, or when the access token expires if that is sooner",
    "28800",
    parse=settings.positive_seconds,
)
HEADER_TIMEOUT_SECONDS = Setting(
    "header_timeout_seconds",
    "DECISIONFLOW_CONSOLE_HEADER_TIMEOUT_SECONDS",
    "a connection whose request head (request line and headers) is not complete this long after it opened, "
    "or after its last response, is closed",
    "10",
    parse=settings.positive_seconds,
)
MAX_CONNECTIONS = Setting(
    "max_connections",
    "DECISIONFLOW_CONSOLE_MAX_CONNECTIONS",
    "connections held at once; one beyond is closed as soon as it is made (keep it below the descriptor limit)",
    "512",
    parse=settings.integer(1, 1_000_000),
)
METRICS = settings.metrics_settings("CONSOLE", port_note=" (the console's own /healthz is on its main port)")
LOG_LEVEL = settings.log_level_setting("CONSOLE", "info")
GRPC_LOG_LEVEL = settings.grpc_log_level_setting("CONSOLE")
PORT_FILE = settings.PORT_FILE

SETTINGS: tuple[Setting[Any], ...] = (
    ADDRESS,
    PUBLIC_URL,
    ORCHESTRATOR_TARGET,
    CA_FILE,
    INSECURE_CLEARTEXT_TOKEN,
    TIMEOUT_SECONDS,
    OIDC_ISSUER,
    OIDC_CLIENT_ID,
    OIDC_CLIENT_SECRET_FILE,
    OIDC_SCOPES,
    OIDC_GROUPS_CLAIM,
    SESSION_KEY_FILE,
    SESSION_LIFETIME_SECONDS,
    HEADER_TIMEOUT_SECONDS,
    MAX_CONNECTIONS,
    *METRICS.all,
    LOG_LEVEL,
    GRPC_LOG_LEVEL,
    PORT_FILE,
)


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    """Everything one console process needs."""

    oidc_issuer: str
    oidc_client_id: str
    session_key: bytes
    address: str = "127.0.0.1:8080"
    public_url: str | None = None
    orchestrator_target: str = "127.0.0.1:50051"
    ca_file: Path | None = None
    allow_cleartext_token: bool = False
    timeout_seconds: float = 10.0
    oidc_client_secret: str | None = None
    oidc_scopes: str = "openid profile email"
    oidc_groups_claim: str = "groups"
    session_lifetime_seconds: float = 28800.0
    header_timeout_seconds: float = 10.0
    max_connections: int = 512
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    log_level: str = "info"
    grpc_log_level: str = "error"
    port_file: Path | None = None

    def __repr__(self) -> str:
        # The session key and the client secret must never reach a log line or a traceback.
        return f"ConsoleConfig(address={self.address!r}, issuer={self.oidc_issuer!r}, client={self.oidc_client_id!r})"

    def origin(self, port: int) -> str:
        """Return the public URL, or http://ADDRESS with the bound port when none is set."""
        if self.public_url is not None:
            return self.public_url
        host, _ = addresses.split_host_port(self.address)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}"


def parser() -> argparse.ArgumentParser:
    """Return the command-line parser of decisionflow-console."""
    cli = arguments.ArgumentParser(
        prog=PROGRAM,
        description="The review console: reviewers read, edit and decide proposals, and operators settle "
        "operations, in a browser, signed in with OpenID Connect. Every call goes to the orchestrator with "
        "the person's own access token; the orchestrator decides. See docs/console.md.",
    )
    add_settings(cli, SETTINGS)
    add_version_flag(cli)
    return cli


def from_namespace(cli: argparse.ArgumentParser, ns: argparse.Namespace, environ: Mapping[str, str]) -> ConsoleConfig:
    """Return the configuration from parsed flags and environ; a bad value exits with status 2."""
    try:
        values = parse_settings(ns, SETTINGS, environ)
        scopes = values.required(OIDC_SCOPES)
        if "openid" not in scopes.split():
            raise SettingError(f"{OIDC_SCOPES.names}: the scopes must include openid, not {scopes!r}")
        address, public = values.required(ADDRESS), values[PUBLIC_URL]
        if public is None and not addresses.is_loopback(address):
            raise SettingError(
                f"{PUBLIC_URL.names} is required when listening beyond loopback ({ADDRESS.flag} {address}): "
                "browsers must reach the console over https"
            )
        return ConsoleConfig(
            oidc_issuer=values.required(OIDC_ISSUER),
            oidc_client_id=values.required(OIDC_CLIENT_ID),
            session_key=values.required(SESSION_KEY_FILE),
            address=address,
            public_url=public,
            orchestrator_target=values.required(ORCHESTRATOR_TARGET),
            ca_file=values[CA_FILE],
            allow_cleartext_token=values.required(INSECURE_CLEARTEXT_TOKEN),
            timeout_seconds=values.required(TIMEOUT_SECONDS),
            oidc_client_secret=values[OIDC_CLIENT_SECRET_FILE],
            oidc_scopes=scopes,
            oidc_groups_claim=values.required(OIDC_GROUPS_CLAIM),
            session_lifetime_seconds=values.required(SESSION_LIFETIME_SECONDS),
            header_timeout_seconds=values.required(HEADER_TIMEOUT_SECONDS),
            max_connections=values.required(MAX_CONNECTIONS),
            metrics_port=values[METRICS.port],
            metrics_address=values.required(METRICS.address),
            log_level=values.required(LOG_LEVEL),
            grpc_log_level=values.required(GRPC_LOG_LEVEL),
            port_file=values[PORT_FILE],
        )
    except SettingError as error:
        cli.error(str(error))


def load(argv: Sequence[str], environ: Mapping[str, str]) -> ConsoleConfig:
    """Return the configuration from argv and environ (a bad value exits with status 2)."""
    cli = parser()
    return from_namespace(cli, cli.parse_args(list(argv)), environ)
