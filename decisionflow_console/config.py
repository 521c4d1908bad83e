"""The console's configuration: one declaration per setting (flag, environment variable, default,
parser, help), and ConsoleConfig, whose fields name them in the order the help and the README list
them. Each value comes from its flag, else its environment variable, else its default. Secrets (the
client secret, the session key) come from files only."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from decisionflow import addresses
from decisionflow.transparency import NoteVerifier
from decisionflow_console.connections import BODY_RATE_GRACE_SECONDS, ConnectionLimits
from decisionflow_server.foundation import arguments, settings
from decisionflow_server.foundation.settings import Setting, SettingError, SettingValues, add_settings
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


def relay_metrics_url(value: str) -> str:
    """Return the URL of decisionflow-relay's metrics endpoint (http or https, /metrics when no path is
    given). A user name or password in it is refused: the relay page shows the URL it tried."""
    parts = urlsplit(value.strip())
    if parts.username is not None or parts.password is not None:
        # Checked first: the words of every other refusal quote the value.
        raise ValueError("the relay's metrics URL must not carry a user name or password (the page shows it)")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected the relay's metrics URL, such as http://relay:9470/metrics, not {value!r}")
    if parts.fragment:
        raise ValueError(f"expected a URL without a fragment, not {value!r}")
    return parts._replace(path=parts.path if parts.path not in ("", "/") else "/metrics").geturl()


def _verifier_key(value: str) -> NoteVerifier:
    return NoteVerifier.from_vkey(value)  # a TransparencyError is a ValueError: the setting's error says which


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
ORCHESTRATOR_TARGET = settings.orchestrator_target_setting()
CA_FILE, INSECURE_CLEARTEXT_TOKEN = settings.orchestrator_tls_settings()
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
SIGN_INS_PER_MINUTE = Setting(
    "sign_ins_per_minute",
    "DECISIONFLOW_CONSOLE_SIGN_INS_PER_MINUTE",
    "sign-ins (GET /login) each client address may start per minute, at most this many at once; one more is "
    "answered 429 (0: no limit; behind a proxy the address is the proxy's)",
    "60",
    parse=settings.integer(0, 1_000_000),
)
AUDIT_LOG_KEY_FILE = Setting(
    "audit_log_key_file",
    "DECISIONFLOW_CONSOLE_AUDIT_LOG_KEY_FILE",
    "file holding the audit log's verifier key (name+keyid+key, as decisionflow-orchestrator audit-keygen prints "
    "it): the audit page checks each leaf's inclusion proof against the latest checkpoint signed with it "
    "(unset: the page shows the leaves and says they are not verified)",
    parse=settings.from_file(_verifier_key),
)
RELAY_METRICS_URL = Setting(
    "relay_metrics_url",
    "DECISIONFLOW_CONSOLE_RELAY_METRICS_URL",
    "URL of decisionflow-relay's metrics endpoint (its --metrics-port), such as http://relay:9470/metrics: the "
    "operators' relay page reads the relay's position there (unset: the page says the relay is not configured)",
    parse=relay_metrics_url,
)
HEADER_TIMEOUT_SECONDS = Setting(
    "header_timeout_seconds",
    "DECISIONFLOW_CONSOLE_HEADER_TIMEOUT_SECONDS",
    "a connection whose request head (request line and headers) is not complete this long after it opened, "
    "or after its last response, is closed",
    "10",
    parse=settings.positive_seconds,
)
BODY_TIMEOUT_SECONDS = Setting(
    "body_timeout_seconds",
    "DECISIONFLOW_CONSOLE_BODY_TIMEOUT_SECONDS",
    "a connection whose request body is not complete this long after its head is closed (only the time the "
    "console was reading counts)",
    "30",
    parse=settings.positive_seconds,
)
BODY_MIN_BYTES_PER_SECOND = Setting(
    "body_min_bytes_per_second",
    "DECISIONFLOW_CONSOLE_BODY_MIN_BYTES_PER_SECOND",
    "a connection whose request body brings fewer bytes per second than this on average, after its first "
    f"{BODY_RATE_GRACE_SECONDS:g} s, is closed (0: no minimum)",
    "1024",
    parse=settings.integer(0, 1_000_000_000),
)
MAX_CONNECTIONS = Setting(
    "max_connections",
    "DECISIONFLOW_CONSOLE_MAX_CONNECTIONS",
    "connections held at once; one more closes the connection that has waited longest for a request head or "
    "for the body of a request from no signed-in session, else itself (keep it below the descriptor limit)",
    "512",
    parse=settings.integer(1, 1_000_000),
)
METRICS = settings.metrics_settings("CONSOLE", port_note=" (the console's own /healthz is on its main port)")
LOGS = settings.log_settings("CONSOLE", "info")
PORT_FILE = settings.PORT_FILE


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsoleConfig:
    """Everything one console process needs: one field per setting."""

    address: str = settings.value(ADDRESS)
    public_url: str | None = settings.value_or_none(PUBLIC_URL)
    orchestrator_target: str = settings.value(ORCHESTRATOR_TARGET)
    ca_file: Path | None = settings.value_or_none(CA_FILE)
    allow_cleartext_token: bool = settings.value(INSECURE_CLEARTEXT_TOKEN)
    timeout_seconds: float = settings.value(TIMEOUT_SECONDS)
    oidc_issuer: str = settings.required(OIDC_ISSUER)
    oidc_client_id: str = settings.required(OIDC_CLIENT_ID)
    oidc_client_secret: str | None = settings.value_or_none(OIDC_CLIENT_SECRET_FILE)
    oidc_scopes: str = settings.value(OIDC_SCOPES)
    oidc_groups_claim: str = settings.value(OIDC_GROUPS_CLAIM)
    session_key: bytes = settings.required(SESSION_KEY_FILE)
    session_lifetime_seconds: float = settings.value(SESSION_LIFETIME_SECONDS)
    sign_ins_per_minute: int = settings.value(SIGN_INS_PER_MINUTE)
    audit_log_key: NoteVerifier | None = settings.value_or_none(AUDIT_LOG_KEY_FILE)
    relay_metrics_url: str | None = settings.value_or_none(RELAY_METRICS_URL)
    connections: ConnectionLimits = settings.group(
        ConnectionLimits,
        header_timeout_seconds=HEADER_TIMEOUT_SECONDS,
        body_timeout_seconds=BODY_TIMEOUT_SECONDS,
        body_min_bytes_per_second=BODY_MIN_BYTES_PER_SECOND,
        max_connections=MAX_CONNECTIONS,
    )
    metrics_port: int | None = settings.value_or_none(METRICS.port)
    metrics_address: str = settings.value(METRICS.address)
    log_level: str = settings.value(LOGS.level)
    grpc_log_level: str = settings.value(LOGS.grpc_level)
    port_file: Path | None = settings.value_or_none(PORT_FILE)

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


SETTINGS = settings.declared(ConsoleConfig)


def parser() -> argparse.ArgumentParser:
    """Return the command-line parser of decisionflow-console."""
    cli = arguments.ArgumentParser(
        prog=PROGRAM,
        description="The review console: reviewers read, edit and decide proposals, operators settle "
        "operations, and auditors check an operation's audit trail, in a browser, signed in with OpenID "
        "Connect. Every call goes to the orchestrator with the person's own access token; the orchestrator "
        "decides. See docs/console.md.",
    )
    add_settings(cli, SETTINGS)
    add_version_flag(cli)
    return cli


def _check(values: SettingValues) -> None:
    scopes = values.required(OIDC_SCOPES)
    if "openid" not in scopes.split():
        raise SettingError(f"{OIDC_SCOPES.names}: the scopes must include openid, not {scopes!r}")
    address = values.required(ADDRESS)
    if values[PUBLIC_URL] is None and not addresses.is_loopback(address):
        raise SettingError(
            f"{PUBLIC_URL.names} is required when listening beyond loopback ({ADDRESS.flag} {address}): "
            "browsers must reach the console over https"
        )


def from_namespace(cli: argparse.ArgumentParser, ns: argparse.Namespace, environ: Mapping[str, str]) -> ConsoleConfig:
    """Return the configuration from parsed flags and environ; a bad value exits with status 2."""
    try:
        settings.refuse_retired_tls_variables(
            environ, ("DECISIONFLOW_CONSOLE_CA_FILE", "DECISIONFLOW_CONSOLE_INSECURE_CLEARTEXT_TOKEN")
        )
    except SettingError as error:
        cli.error(str(error))
    return settings.load(ConsoleConfig, cli, ns, environ, check=_check)


def load(argv: Sequence[str], environ: Mapping[str, str]) -> ConsoleConfig:
    """Return the configuration from argv and environ (a bad value exits with status 2)."""
    cli = parser()
    return from_namespace(cli, cli.parse_args(list(argv)), environ)
