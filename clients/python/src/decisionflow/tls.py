"""TLS credentials for servers and channels, read from PEM files.

A server given a client CA requires and verifies a client certificate (mutual TLS); the verified
certificate's CN and SANs then name the principal (see decisionflow_server.runtime.auth).
"""

from __future__ import annotations

import os
from pathlib import Path

import grpc

StrPath = str | os.PathLike[str]


def _read_pem(path: StrPath, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise OSError(exc.errno, f"cannot read {what} {os.fspath(path)!r}: {exc.strerror}") from exc


def server_credentials(
    cert_file: StrPath, key_file: StrPath, client_ca_file: StrPath | None = None
) -> grpc.ServerCredentials:
    """Return server TLS credentials; with client_ca_file every client must present a certificate
    that CA signed."""
    pair = (_read_pem(key_file, "private key"), _read_pem(cert_file, "certificate chain"))
    if client_ca_file is None:
        return grpc.ssl_server_credentials([pair])
    # With require_client_auth False gRPC does not even request a client certificate, and the CA
    # would be silently ignored.
    return grpc.ssl_server_credentials(
        [pair], root_certificates=_read_pem(client_ca_file, "client CA"), require_client_auth=True
    )


def channel_credentials(
    ca_file: StrPath | None, cert_file: StrPath | None = None, key_file: StrPath | None = None
) -> grpc.ChannelCredentials:
    """Return channel TLS credentials trusting ca_file (None: the system roots), presenting the
    client certificate when cert_file and key_file are both given."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("a client certificate needs both cert_file and key_file")
    return grpc.ssl_channel_credentials(
        root_certificates=None if ca_file is None else _read_pem(ca_file, "CA certificate"),
        private_key=None if key_file is None else _read_pem(key_file, "private key"),
        certificate_chain=None if cert_file is None else _read_pem(cert_file, "certificate chain"),
    )
