"""Addresses to listen on and targets to call: ``host:port``, ``[IPv6]:port`` or a ``unix:`` socket path.

A port is always explicit. gRPC would take ``localhost`` alone as ``localhost:443``, so a server
given ``--address localhost`` would listen on 443 and a client given ``--target vm`` would call
port 443: both are refused instead. Whether an address is loopback is decided by its literal
host (``localhost``, ``127.0.0.0/8``, ``::1``); nothing is resolved, so a name that happens to
resolve to 127.0.0.1 today counts as beyond loopback.
"""

from __future__ import annotations

import ipaddress

# gRPC targets naming a local socket file; they carry no host and no port.
UNIX_SCHEMES = ("unix:", "unix-abstract:")


def split_host_port(address: str) -> tuple[str, int]:
    """Return the host (IPv6 without brackets) and port of ``host:port`` or ``[IPv6]:port``; raise
    ValueError saying what is expected when the port is missing or not 0 to 65535."""
    expected = f"expected host:port or [IPv6]:port, not {address!r}"
    if address.startswith("["):
        host, bracket, rest = address[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ValueError(f"{expected} (no port)")
        port_text = rest[1:]
    else:
        host, colon, port_text = address.rpartition(":")
        if not colon:
            raise ValueError(f"{expected} (no port)")
        if ":" in host:
            raise ValueError(f"{expected} (write an IPv6 address in brackets)")
    if not host.strip() or host != host.strip():
        raise ValueError(f"{expected} (no host)")
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        raise ValueError(f"{expected} (the port must be a number from 0 to 65535)")
    return host, int(port_text)


def check_address(address: str) -> str:
    """Return address when it is ``host:port``, ``[IPv6]:port`` or a ``unix:`` target; raise ValueError otherwise."""
    if address.startswith(UNIX_SCHEMES):
        if not address.partition(":")[2]:
            raise ValueError(f"expected a socket path after {address!r}")
        return address
    split_host_port(address)
    return address


def is_loopback(address: str) -> bool:
    """Return True when address's literal host is loopback: localhost, 127.0.0.0/8 or ::1 (no DNS lookup)."""
    try:
        host, _ = split_host_port(address)
    except ValueError:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
