"""Authentication and TLS settings shared by every server, and the parts they become at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from decisionflow.auth import RPC_ROLES, AuthInterceptor, CredentialsReloader, load_credentials
from decisionflow.serving import check_exposure
from decisionflow.settings import Setting, SettingError, SettingValues, path
from decisionflow.tls import server_credentials

CREDENTIALS_FILE = Setting(
    "credentials_file",
    "DECISIONFLOW_CREDENTIALS_FILE",
    "JSON file of token hashes and certificate principals with their roles (unset: authentication off, loopback only)",
    parse=path,
)
TLS_CERT = Setting(
    "tls_cert", "DECISIONFLOW_TLS_CERT", "server certificate (PEM); with --tls-key enables TLS", parse=path
)
TLS_KEY = Setting("tls_key", "DECISIONFLOW_TLS_KEY", "server private key (PEM)", parse=path)
TLS_CLIENT_CA = Setting(
    "tls_client_ca", "DECISIONFLOW_TLS_CLIENT_CA", "CA bundle for client certificates (enables mTLS)", parse=path
)
SETTINGS: tuple[Setting[Path], ...] = (CREDENTIALS_FILE, TLS_CERT, TLS_KEY, TLS_CLIENT_CA)


@dataclass(frozen=True, slots=True)
class ServerSecurity:
    """Where a server's credentials file and TLS material are; all None means loopback only, no auth."""

    credentials_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None


def from_values(values: SettingValues) -> ServerSecurity:
    """Return the security settings from parsed setting values; raise SettingError when inconsistent."""
    security = ServerSecurity(values[CREDENTIALS_FILE], values[TLS_CERT], values[TLS_KEY], values[TLS_CLIENT_CA])
    if (security.tls_cert is None) != (security.tls_key is None):
        raise SettingError(f"{TLS_CERT.names} and {TLS_KEY.names} must be given together")
    if security.tls_client_ca is not None and security.tls_cert is None:
        raise SettingError(f"{TLS_CLIENT_CA.names} needs {TLS_CERT.flag} and {TLS_KEY.flag}")
    return security


def server_parts(address: str, security: ServerSecurity) -> tuple[AuthInterceptor, grpc.ServerCredentials | None]:
    """Refuse exposure beyond loopback without TLS and authentication; return the auth interceptor and
    the TLS credentials (None: plaintext)."""
    check_exposure(address, tls=security.tls_cert is not None, authenticated=security.credentials_file is not None)
    credentials = load_credentials(security.credentials_file) if security.credentials_file else None
    tls = None
    if security.tls_cert is not None and security.tls_key is not None:
        tls = server_credentials(security.tls_cert, security.tls_key, security.tls_client_ca)
    return AuthInterceptor(credentials, RPC_ROLES, client_certificates=security.tls_client_ca is not None), tls


def credentials_reloader(security: ServerSecurity, auth: AuthInterceptor) -> CredentialsReloader | None:
    """Return what re-reads the credentials file into auth (on SIGHUP), or None when authentication is off."""
    if security.credentials_file is None or not auth.authenticated:
        return None
    return CredentialsReloader(security.credentials_file, auth)
