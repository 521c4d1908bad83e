"""Authentication and TLS settings shared by every server, and the parts they become at start-up."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc

from decisionflow.auth import RPC_ROLES, AuthInterceptor, load_credentials
from decisionflow.serving import check_exposure
from decisionflow.settings import Setting
from decisionflow.tls import server_credentials

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "credentials_file",
        "DECISIONFLOW_CREDENTIALS_FILE",
        "JSON file of token hashes and certificate principals with their roles (unset: authentication off, "
        "loopback only)",
    ),
    Setting("tls_cert", "DECISIONFLOW_TLS_CERT", "server certificate (PEM); with --tls-key enables TLS"),
    Setting("tls_key", "DECISIONFLOW_TLS_KEY", "server private key (PEM)"),
    Setting("tls_client_ca", "DECISIONFLOW_TLS_CLIENT_CA", "CA bundle for client certificates (enables mTLS)"),
)


@dataclass(frozen=True, slots=True)
class ServerSecurity:
    """Where a server's credentials file and TLS material are; all None means loopback only, no auth."""

    credentials_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None


def from_values(values: Mapping[str, str | None]) -> ServerSecurity:
    """Return the security settings from resolved setting values; raise ValueError when inconsistent."""
    paths = {key: Path(values[key] or "") if values.get(key) else None for key in (s.key for s in SETTINGS)}
    security = ServerSecurity(**paths)
    if (security.tls_cert is None) != (security.tls_key is None):
        raise ValueError("tls_cert and tls_key must be given together")
    if security.tls_client_ca is not None and security.tls_cert is None:
        raise ValueError("tls_client_ca needs tls_cert and tls_key")
    return security


def server_parts(address: str, security: ServerSecurity) -> tuple[AuthInterceptor, grpc.ServerCredentials | None]:
    """Refuse exposure beyond loopback without TLS and authentication; return the auth interceptor and
    the TLS credentials (None: plaintext)."""
    check_exposure(address, tls=security.tls_cert is not None, authenticated=security.credentials_file is not None)
    credentials = load_credentials(security.credentials_file) if security.credentials_file else None
    tls = None
    if security.tls_cert is not None and security.tls_key is not None:
        tls = server_credentials(security.tls_cert, security.tls_key, security.tls_client_ca)
    return AuthInterceptor(credentials, RPC_ROLES), tls
