"""Authentication and TLS settings shared by every server, and the parts they become at start-up."""

from __future__ import annotations

import dataclasses
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from decisionflow.addresses import is_loopback
from decisionflow.tls import server_credentials
from decisionflow_server.foundation.exposure import check_exposure
from decisionflow_server.foundation.settings import Setting, SettingError, SettingValues, non_empty, part, path, seconds
from decisionflow_server.runtime.auth import (
    RPC_ROLES,
    AuthInterceptor,
    CredentialsReloader,
    JwtVerifier,
    OidcConfig,
    Role,
    load_credentials,
    parse_role,
)

CREDENTIALS_FILE = Setting(
    "credentials_file",
    "DECISIONFLOW_CREDENTIALS_FILE",
    "JSON file of token hashes and certificate principals with their roles (unset, and no --oidc-issuer: "
    "authentication off, loopback only)",
    parse=path,
)
TLS_CERT = Setting(
    "tls_cert", "DECISIONFLOW_TLS_CERT", "server certificate (PEM); with --tls-key enables TLS", parse=path
)
TLS_KEY = Setting("tls_key", "DECISIONFLOW_TLS_KEY", "server private key (PEM)", parse=path)
TLS_CLIENT_CA = Setting(
    "tls_client_ca", "DECISIONFLOW_TLS_CLIENT_CA", "CA bundle for client certificates (enables mTLS)", parse=path
)


def provider_url(value: str) -> str:
    """Return an https URL, or an http URL whose host is loopback (keys fetched in cleartext from
    anywhere else could be replaced on the way, and with them every identity)."""
    parts = urllib.parse.urlsplit(value.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"expected an https:// URL, not {value!r}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname  # an IPv6 literal
    if parts.scheme == "http" and not is_loopback(f"{host}:0"):
        raise ValueError(f"expected an https:// URL (http only for localhost, 127.x or ::1), not {value!r}")
    return value.strip()


def role_map(value: str) -> tuple[tuple[str, frozenset[Role]], ...]:
    """Return (group, roles) pairs from ``group=role,group=role``; a group listed twice gets both roles."""
    granted: dict[str, set[Role]] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        group, equals, role = (part.strip() for part in item.rpartition("="))
        if not equals or not group or not role:
            raise ValueError(f"expected group=role pairs separated by commas, not {item.strip()!r}")
        granted.setdefault(group, set()).add(parse_role(role))
    return tuple((group, frozenset(roles)) for group, roles in granted.items())


def _oidc_default(field: str) -> str:
    """Return the default of OidcConfig's field as a setting's default text (its one declaration)."""
    default = {f.name: f.default for f in dataclasses.fields(OidcConfig)}[field]
    return f"{default:g}" if isinstance(default, float) else str(default)


OIDC_ISSUER = Setting(
    "oidc_issuer",
    "DECISIONFLOW_OIDC_ISSUER",
    "OIDC issuer URL: accept access tokens (JWTs) it signed, beside the credentials file (with --oidc-audience)",
    parse=provider_url,
)
OIDC_AUDIENCE = Setting(
    "oidc_audience",
    "DECISIONFLOW_OIDC_AUDIENCE",
    "the audience (aud) an OIDC access token must name to be accepted here",
    parse=non_empty,
)
OIDC_JWKS_URL = Setting(
    "oidc_jwks_url",
    "DECISIONFLOW_OIDC_JWKS_URL",
    "URL of the issuer's signing keys (JWKS); unset: the jwks_uri of the issuer's discovery document",
    parse=provider_url,
)
OIDC_ROLES_CLAIM = Setting(
    "oidc_roles_claim",
    "DECISIONFLOW_OIDC_ROLES_CLAIM",
    "the token claim listing the groups --oidc-role-map maps to roles (a list, or a space-separated string)",
    _oidc_default("roles_claim"),
    parse=non_empty,
)
OIDC_ROLE_MAP = Setting(
    "oidc_role_map",
    "DECISIONFLOW_OIDC_ROLE_MAP",
    "the roles each group grants, e.g. reviewers=reviewer,authors=author (a group may be listed again for "
    "another role; other groups grant nothing)",
    "",
    parse=role_map,
)
OIDC_GROUPS_CLAIM = Setting(
    "oidc_groups_claim",
    "DECISIONFLOW_OIDC_GROUPS_CLAIM",
    "the token claim listing the caller's groups, as review rules name them (a list, or a space-separated "
    "string; a name that is not 1 to 64 of a-z 0-9 . _ - is left out)",
    _oidc_default("groups_claim"),
    parse=non_empty,
)
OIDC_SUBJECT_CLAIM = Setting(
    "oidc_subject_claim",
    "DECISIONFLOW_OIDC_SUBJECT_CLAIM",
    "the token claim naming the caller, recorded as author or reviewer (e.g. email)",
    _oidc_default("subject_claim"),
    parse=non_empty,
)
OIDC_LEEWAY = Setting(
    "oidc_leeway_seconds",
    "DECISIONFLOW_OIDC_LEEWAY_SECONDS",
    "clock skew allowed when checking a token's exp, nbf and iat",
    _oidc_default("leeway_seconds"),
    parse=seconds,
)
OIDC_SETTINGS: tuple[Setting[Any], ...] = (
    OIDC_ISSUER,
    OIDC_AUDIENCE,
    OIDC_JWKS_URL,
    OIDC_ROLES_CLAIM,
    OIDC_ROLE_MAP,
    OIDC_GROUPS_CLAIM,
    OIDC_SUBJECT_CLAIM,
    OIDC_LEEWAY,
)
SETTINGS: tuple[Setting[Any], ...] = (CREDENTIALS_FILE, TLS_CERT, TLS_KEY, TLS_CLIENT_CA, *OIDC_SETTINGS)


@dataclass(frozen=True, slots=True)
class ServerSecurity:
    """Where a server's credentials file and TLS material are, and which OIDC issuer's tokens it
    accepts; all None means loopback only, no auth."""

    credentials_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    oidc: OidcConfig | None = None

    @property
    def authenticated(self) -> bool:
        """True when callers must authenticate (a credentials file, OIDC tokens, or both)."""
        return self.credentials_file is not None or self.oidc is not None


def _oidc(values: SettingValues) -> OidcConfig | None:
    issuer, audience = values[OIDC_ISSUER], values[OIDC_AUDIENCE]
    if issuer is None and audience is None:
        return None
    if issuer is None or audience is None:
        raise SettingError(f"{OIDC_ISSUER.names} and {OIDC_AUDIENCE.names} must be given together")
    return OidcConfig(
        issuer,
        audience,
        jwks_url=values[OIDC_JWKS_URL],
        roles_claim=values.required(OIDC_ROLES_CLAIM),
        role_map=values.required(OIDC_ROLE_MAP),
        groups_claim=values.required(OIDC_GROUPS_CLAIM),
        subject_claim=values.required(OIDC_SUBJECT_CLAIM),
        leeway_seconds=values.required(OIDC_LEEWAY),
    )


def from_values(values: SettingValues) -> ServerSecurity:
    """Return the security settings from parsed setting values; raise SettingError when inconsistent."""
    security = ServerSecurity(
        values[CREDENTIALS_FILE], values[TLS_CERT], values[TLS_KEY], values[TLS_CLIENT_CA], _oidc(values)
    )
    if (security.tls_cert is None) != (security.tls_key is None):
        raise SettingError(f"{TLS_CERT.names} and {TLS_KEY.names} must be given together")
    if security.tls_client_ca is not None and security.tls_cert is None:
        raise SettingError(f"{TLS_CLIENT_CA.names} needs {TLS_CERT.flag} and {TLS_KEY.flag}")
    return security


def from_settings() -> ServerSecurity:
    """A configuration field (``settings.part``) holding the security a server's settings give."""
    return part(SETTINGS, from_values)


def server_parts(address: str, security: ServerSecurity) -> tuple[AuthInterceptor, grpc.ServerCredentials | None]:
    """Refuse exposure beyond loopback without TLS and authentication; return the auth interceptor and
    the TLS credentials (None: plaintext)."""
    check_exposure(address, tls=security.tls_cert is not None, authenticated=security.authenticated)
    credentials = load_credentials(security.credentials_file) if security.credentials_file else None
    tls = None
    if security.tls_cert is not None and security.tls_key is not None:
        tls = server_credentials(security.tls_cert, security.tls_key, security.tls_client_ca)
    oidc = None if security.oidc is None else JwtVerifier(security.oidc)
    auth = AuthInterceptor(credentials, RPC_ROLES, client_certificates=security.tls_client_ca is not None, oidc=oidc)
    return auth, tls


def credentials_reloader(security: ServerSecurity, auth: AuthInterceptor) -> CredentialsReloader | None:
    """Return what re-reads the credentials file into auth (on SIGHUP), or None when authentication is off."""
    if security.credentials_file is None or not auth.authenticated:
        return None
    return CredentialsReloader(security.credentials_file, auth)
