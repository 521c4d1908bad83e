"""A server's transport limits: streams per connection, connection idle time, age and grace, the
connection cap, one peer's share of it, the part of it connections without a call may hold, the
time a connection may stay open without a call, and the peer addresses never refused new connections."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decisionflow_server.foundation.settings._parsers import Network, integer, networks, positive_seconds, seconds
from decisionflow_server.foundation.settings._setting import Setting


@dataclass(frozen=True, slots=True)
class TransportSettings:
    """A server's transport limits, one setting each (see ``transport_settings``)."""

    max_concurrent_streams: Setting[int]
    max_connection_idle_seconds: Setting[float]
    max_connection_age_seconds: Setting[float]
    max_connection_age_grace_seconds: Setting[float]
    max_connections: Setting[int]
    max_connections_per_peer: Setting[int]
    max_unauthenticated_connections: Setting[int]
    first_call_timeout_seconds: Setting[float]
    trusted_peer_addresses: Setting[tuple[Network, ...]]

    @property
    def all(self) -> tuple[Setting[Any], ...]:
        """Every transport setting, in the order the help and the README list them."""
        return (
            self.max_concurrent_streams,
            self.max_connection_idle_seconds,
            self.max_connection_age_seconds,
            self.max_connection_age_grace_seconds,
            self.max_connections,
            self.max_connections_per_peer,
            self.max_unauthenticated_connections,
            self.first_call_timeout_seconds,
            self.trusted_peer_addresses,
        )


def transport_settings(service: str) -> TransportSettings:
    """The transport limits of a server (``DECISIONFLOW_<SERVICE>_...``): concurrent streams per
    connection, connection idle time, age and grace, a cap on connections, the share of it one peer
    address may hold, the part of it unauthenticated connections may hold, the time a connection
    may stay open without a call and the peer addresses never refused new connections."""
    prefix = f"DECISIONFLOW_{service}_"
    return TransportSettings(
        Setting(
            "max_concurrent_streams",
            prefix + "MAX_CONCURRENT_STREAMS",
            "calls one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)",
            "64",
            parse=integer(1, 10_000),
        ),
        Setting(
            "max_connection_idle_seconds",
            prefix + "MAX_CONNECTION_IDLE_SECONDS",
            "close (GOAWAY) a connection that has had no call for this long",
            "300",
            parse=positive_seconds,
        ),
        Setting(
            "max_connection_age_seconds",
            prefix + "MAX_CONNECTION_AGE_SECONDS",
            "close (GOAWAY) a connection this old; clients reconnect",
            "1800",
            parse=positive_seconds,
        ),
        Setting(
            "max_connection_age_grace_seconds",
            prefix + "MAX_CONNECTION_AGE_GRACE_SECONDS",
            "after that GOAWAY, how long calls in flight may finish before the connection is cut",
            "30",
            parse=seconds,
        ),
        Setting(
            "max_connections",
            prefix + "MAX_CONNECTIONS",
            "connections the server holds at once; beyond it a new connection is closed",
            "1000",
            parse=integer(1, 1_000_000),
        ),
        Setting(
            "max_connections_per_peer",
            prefix + "MAX_CONNECTIONS_PER_PEER",
            "connections one peer address may hold; the excess is closed; unset: half of --max-connections",
            parse=integer(1, 1_000_000),
        ),
        Setting(
            "max_unauthenticated_connections",
            prefix + "MAX_UNAUTHENTICATED_CONNECTIONS",
            "connections without an authenticated call the server holds in all; the excess is closed and "
            "its peer addresses refused new connections for a while; unset: three quarters of --max-connections",
            parse=integer(1, 1_000_000),
        ),
        Setting(
            "first_call_timeout_seconds",
            prefix + "FIRST_CALL_TIMEOUT_SECONDS",
            "close a connection on which no authenticated call came this long after it opened "
            "(health checks do not count)",
            "10",
            parse=positive_seconds,
        ),
        Setting(
            "trusted_peer_addresses",
            prefix + "TRUSTED_PEER_ADDRESSES",
            "IP addresses and CIDR networks, separated by commas, never refused new connections for the "
            "connections they hold without an authenticated call (a proxy, a mesh sidecar, a probe; their excess "
            "connections are still closed); 0.0.0.0/0,::/0 turns that refusal off",
            parse=networks,
        ),
    )
