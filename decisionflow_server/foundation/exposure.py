"""The one rule of where a server may listen: beyond loopback only with TLS and authentication.

A leaf: the server's security settings check it (decisionflow_server.runtime.server_security) and start-up turns
its refusal into a configuration error (decisionflow_server.runtime.startup)."""

from __future__ import annotations

from decisionflow.addresses import is_loopback


class ExposureRefused(ValueError):
    """A server was asked to listen beyond loopback without TLS and authentication."""


def check_exposure(address: str, *, tls: bool, authenticated: bool) -> None:
    """Refuse to listen beyond loopback unless both TLS and authentication are configured."""
    if not is_loopback(address) and not (tls and authenticated):
        raise ExposureRefused(f"refusing to listen on {address}: beyond loopback a server needs TLS and authentication")
