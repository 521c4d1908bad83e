"""Addresses to listen on and targets to call: ``host:port``, ``[IPv6]:port`` or a ``unix:`` socket path.

A port is always explicit. gRPC would take ``localhost`` alone as ``localhost:443``, so a server
given ``--address localhost`` would listen on 443 and a client given ``--target vm`` would call
port 443: both are refused instead. Whether an address is loopback is decided by its literal
host (``localhost``, ``127.0.0.0/8``, ``::1``); nothing is resolved, so a name that happens to
resolve to 127.0.0.1 today counts as beyond loopback.

A target to call may name several replicas: IP addresses of one family, comma-separated
(``10.0.0.5:50051,10.0.0.6:50051``, or in gRPC's own spelling ``ipv4:10.0.0.5:50051,10.0.0.6:50051``).
``grpc_target`` turns the list into gRPC's ``ipv4:``/``ipv6:`` target, over which the channels'
``round_robin`` policy spreads the calls, skipping a replica that is down. A name is one target: a
DNS name with several addresses is spread over the same way, so a list of names is refused.
"""

from __future__ import annotations

import ipaddress

# gRPC targets naming a local socket file; they carry no host and no port.
UNIX_SCHEMES = ("unix:", "unix-abstract:")
# gRPC targets naming IP addresses, one or several, comma-separated.
IP_SCHEMES = ("ipv4:", "ipv6:")


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


def split_targets(target: str) -> list[str]:
    """Return the addresses a target to call names: several for a comma-separated list (or gRPC's
    ``ipv4:``/``ipv6:`` spelling of one), else the target itself."""
    for scheme in IP_SCHEMES:
        if target.startswith(scheme):
            return target.removeprefix(scheme).split(",")
    return target.split(",") if "," in target else [target]


def grpc_target(target: str) -> str:
    """Return target as gRPC takes it: several IP addresses as gRPC's ``ipv4:``/``ipv6:`` list, anything
    else as it is; raise ValueError for a list that is not IP addresses of one family."""
    addresses = split_targets(target)
    if len(addresses) == 1 and not target.startswith(IP_SCHEMES):
        return target
    families = set()
    for address in addresses:
        host, _ = split_host_port(address)
        try:
            families.add(ipaddress.ip_address(host).version)
        except ValueError:
            raise ValueError(
                f"expected IP addresses in a list of targets, not {host!r} in {target!r} (a name that resolves "
                "to several addresses is given alone)"
            ) from None
    if len(families) != 1:
        raise ValueError(f"expected IP addresses of one family in a list of targets, not {target!r}")
    return f"ipv{families.pop()}:{','.join(addresses)}"


def check_targets(target: str) -> str:
    """Return target when it is one address ``check_address`` takes, or a list of IP addresses of one
    family; raise ValueError otherwise."""
    if len(split_targets(target)) == 1 and not target.startswith(IP_SCHEMES):
        return check_address(target)
    grpc_target(target)
    return target


def is_loopback(address: str) -> bool:
    """Return True when address's literal host is loopback: localhost, 127.0.0.0/8 or ::1 (no DNS lookup);
    for a list of targets, when every one is."""
    targets = split_targets(address)
    if len(targets) > 1 or address.startswith(IP_SCHEMES):
        return all(is_loopback(target) for target in targets)
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
