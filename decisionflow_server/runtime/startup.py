"""Why a service could not start, said in one line: what failed, the setting to fix, and the cause.

A service that cannot start logs one JSON line at level error (``decisionflow_server.foundation.logs``) whose
message reads ``<program>: <what failed> (<flag> / <environment variable>): <cause>`` and exits:

- 2 (``EXIT_CONFIGURATION``): a setting is wrong: an address refused or not bindable as given, a
  database URL that cannot be parsed or has no driver, a credentials, TLS or CA file that is
  missing, unreadable or malformed, a token that would travel in cleartext;
- 1 (``EXIT_RUNTIME``): the setting may be right but the world is not ready: the port is in use,
  the database refuses connections or fails while being opened, anything unforeseen.

The traceback is part of that line (its ``error`` field) only at ``--log-level debug``. The
checks here run before the work they guard, so a refusal leaves nothing behind: no database file
created, no port half-bound, and no gRPC core message on stderr beside the one line.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decisionflow.addresses import UNIX_SCHEMES, split_host_port
from decisionflow.channels import CleartextTokenRefused
from decisionflow_server.foundation.exposure import ExposureRefused
from decisionflow_server.foundation.settings import Setting
from decisionflow_server.foundation.startup_errors import StartupError, configuration_error, describe, runtime_error
from decisionflow_server.runtime import workers
from decisionflow_server.runtime.auth import AuthInterceptor, CredentialsError
from decisionflow_server.runtime.server_security import (
    CREDENTIALS_FILE,
    OIDC_ISSUER,
    TLS_CERT,
    TLS_CLIENT_CA,
    TLS_KEY,
    ServerSecurity,
    server_parts,
)

if TYPE_CHECKING:
    import grpc

# A port another process holds may be free in a minute; an address that is not this host's, or a
# port below 1024 without the privilege, stays wrong until the setting changes.
_RUNTIME_BIND_ERRORS = frozenset({errno.EADDRINUSE})


@contextmanager
def starting(address: Setting[Any]) -> Iterator[None]:
    """Turn whatever stops a server from starting into a StartupError (unforeseen failures exit 1)."""
    try:
        yield
    except StartupError:
        raise
    except ExposureRefused as exc:
        raise configuration_error(
            "cannot listen", (address, TLS_CERT, TLS_KEY, CREDENTIALS_FILE, OIDC_ISSUER), describe(exc)
        ) from exc
    except Exception as exc:
        raise runtime_error("cannot start", (), f"{type(exc).__name__}: {describe(exc)}") from exc


@contextmanager
def claimed_address(address: str, setting: Setting[Any]) -> Iterator[str]:
    """Hold the claim on address for this service's workers (decisionflow_server.runtime.workers.claim) and check that
    they can bind it; yield it with port 0 replaced by the port held. Another service on the port
    raises a runtime StartupError naming setting, before any worker opens a database."""
    with ExitStack() as held:
        try:
            claimed = held.enter_context(workers.claim(address))
        except OSError as exc:
            raise make_bind_error(address, setting, exc) from exc
        check_bindable(claimed, setting, reuse_port=True)
        yield claimed


def make_bind_error(address: str, setting: Setting[Any], exc: OSError) -> StartupError:
    """Return the StartupError for address that cannot be bound: runtime for a port in use, else configuration."""
    make = runtime_error if exc.errno in _RUNTIME_BIND_ERRORS else configuration_error
    return make(f"cannot listen on {address}", (setting,), exc.strerror or describe(exc))


def check_bindable(address: str, setting: Setting[Any], *, reuse_port: bool) -> None:
    """Bind address once, as the server is about to (with SO_REUSEPORT when its workers share the
    port), and raise a StartupError saying why it cannot be."""
    if address.startswith(UNIX_SCHEMES):
        return
    host, port = split_host_port(address)
    try:
        candidates = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise configuration_error(f"cannot listen on {address}", (setting,), f"unknown host: {exc.strerror}") from exc
    failures: list[OSError] = []
    for family, kind, protocol, _, bound in candidates:
        try:
            probe = socket.socket(family, kind, protocol)
        except OSError:
            continue  # an address family this host lacks; the server skips it too
        with probe:
            # The server sets SO_REUSEADDR; SO_REUSEPORT only when workers share the port. Without it
            # the probe, like the server, is refused beside any listener, another service's workers too.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, int(reuse_port))
            try:
                probe.bind(bound)
            except OSError as exc:
                failures.append(exc)
                continue
        return
    if failures:
        raise make_bind_error(address, setting, failures[0]) from failures[0]


def _reason(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"not usable PEM ({exc.reason or describe(exc)})"
    return exc.strerror or describe(exc)


def check_tls_pair(cert: Path | None, key: Path | None) -> None:
    """Raise a configuration StartupError naming --tls-cert or --tls-key unless both files are readable
    PEM, the certificate holds a certificate and the key is its private key."""
    if cert is None or key is None:
        return
    check_ca_file(cert, TLS_CERT, what="cannot use the TLS certificate")
    try:
        key.read_bytes()
    except OSError as exc:
        raise configuration_error("cannot use the TLS key", (TLS_KEY,), f"{key}: {_reason(exc)}") from exc
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # An encrypted key cannot be used by the server either: answer the prompt with no password.
        context.load_cert_chain(cert, key, password=lambda: b"")
    except (OSError, ssl.SSLError) as exc:
        raise configuration_error(
            "cannot use the TLS key", (TLS_KEY,), f"{key}: not an unencrypted private key of {cert} ({_reason(exc)})"
        ) from exc


def check_ca_file(ca_file: Path | None, setting: Setting[Any], *, what: str = "cannot use the CA file") -> None:
    """Raise a configuration StartupError naming setting unless ca_file is readable PEM with a certificate."""
    if ca_file is None:
        return
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise configuration_error(what, (setting,), f"{ca_file}: {_reason(exc)}") from exc


def security_parts(address: str, security: ServerSecurity) -> tuple[AuthInterceptor, grpc.ServerCredentials | None]:
    """Return ``server_parts(address, security)``; a credentials, certificate, key or client CA file that
    is missing, unreadable or malformed raises a configuration StartupError naming its setting (listening
    beyond loopback without TLS and authentication still raises ExposureRefused)."""
    check_tls_pair(security.tls_cert, security.tls_key)
    check_ca_file(security.tls_client_ca, TLS_CLIENT_CA)
    try:
        return server_parts(address, security)
    except CredentialsError as exc:
        raise configuration_error("cannot use the credentials file", (CREDENTIALS_FILE,), describe(exc)) from exc
    except OSError as exc:
        raise configuration_error(
            "cannot read the TLS files", (TLS_CERT, TLS_KEY, TLS_CLIENT_CA), describe(exc)
        ) from exc


@contextmanager
def refusing_cleartext(settings: Sequence[Setting[Any]]) -> Iterator[None]:
    """Turn a CleartextTokenRefused inside into a configuration StartupError naming settings."""
    try:
        yield
    except CleartextTokenRefused as exc:
        raise configuration_error("cannot call", settings, describe(exc)) from exc
