"""Real network namespaces for the partition campaigns: a receiver's, an orchestrator's, and links to cut.

    root namespace (test, clients, reconciler)
      ├── veth ── orchestrator namespace (10.A.B.2)
      └── veth ── receiver namespace     (10.A.B.6)
    orchestrator (10.A.B.9) ── veth ── receiver (10.A.B.10)    ← the link the faults act on

Faults are per direction, as iptables rules in the sending namespace's OUTPUT chain: a cut drops
every packet (requests, or replies, or both), a lossy link drops a fixed share (every Nth); a delay is
``tc netem`` on the same interfaces when the kernel has it, else an NFQUEUE rule whose packets a
delayer process (``tests.campaigns.netdelay``) holds before accepting them. Healing flushes both. The root
namespace keeps a direct path to each server, so the checks and the reconciler reach both
whatever the faults are.
"""

from __future__ import annotations

import ctypes
import ipaddress
import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum

import pytest

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
_counter = itertools.count(1)


class Direction(Enum):
    """Which way packets are dropped on the orchestrator-receiver link."""

    REQUESTS = "orchestrator->receiver"
    REPLIES = "receiver->orchestrator"
    BOTH = "both"


def enter(namespace: str) -> None:
    """Move the calling process (a freshly forked child) into a named network namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"{NETNS_DIR}/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {namespace} failed")
    finally:
        os.close(fd)


def _run(*argv: str, namespace: str | None = None) -> str:
    command = ["ip", "netns", "exec", namespace, *argv] if namespace else list(argv)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 under 10.0.0.0/8 that no address of the root namespace is in (one per test and process)."""
    used = _run("ip", "-o", "-4", "addr", "show")
    start = os.getpid() * 7 + next(_counter) * 131
    for i in range(4096):
        n = (start + i) % (200 * 256)
        subnet = ipaddress.IPv4Network(f"10.{40 + n // 256}.{n % 256}.0/24")
        if f" {subnet.network_address.exploded.rsplit('.', 1)[0]}." not in used:
            return subnet
    raise RuntimeError("no free 10.x.y.0/24 for the test namespaces")


@dataclass
class Topology:
    """Two namespaces, three links, and the faults applied to the orchestrator-receiver link."""

    orchestrator_ns: str
    receiver_ns: str
    subnet: ipaddress.IPv4Network
    netem: bool | None = None  # None: not tried yet
    faults: list[str] = field(default_factory=list)
    dropped: int = 0

    def host(self, index: int) -> str:
        """The subnet's address number index."""
        return str(self.subnet.network_address + index)

    @property
    def orchestrator_address(self) -> str:
        """The orchestrator's address as the root namespace (clients, reconciler) dials it."""
        return self.host(2)

    @property
    def receiver_address(self) -> str:
        """The receiver's address as the root namespace dials it."""
        return self.host(6)

    @property
    def receiver_address_for_orchestrator(self) -> str:
        """The receiver's address on the orchestrator-receiver link."""
        return self.host(10)

    def _iptables(self, namespace: str, *rule: str) -> None:
        _run("iptables", "-w", *rule, namespace=namespace)

    def _egress(self, direction: Direction) -> list[tuple[str, str]]:
        """(namespace, destination) pairs whose OUTPUT a fault in this direction acts on."""
        requests = (self.orchestrator_ns, self.receiver_address_for_orchestrator)
        replies = (self.receiver_ns, self.host(9))
        return {Direction.REQUESTS: [requests], Direction.REPLIES: [replies], Direction.BOTH: [requests, replies]}[
            direction
        ]

    def cut(self, direction: Direction) -> None:
        """Drop every packet on the orchestrator-receiver link going this way."""
        for namespace, destination in self._egress(direction):
            self._iptables(namespace, "-A", "OUTPUT", "-d", destination, "-j", "DROP")
        self.faults.append(f"cut {direction.value}")

    def lose(self, share: float, direction: Direction = Direction.BOTH) -> None:
        """Drop share of the packets on the link going this way: every (1/share)-th one, so that a run
        that sends ten packets at 10 % loses one for certain (at random, a run of 50 packets lost none
        about once in 200 runs, and the campaign could not tell a lossy link from a healthy one)."""
        every = max(1, round(1 / share))
        for namespace, destination in self._egress(direction):
            self._iptables(
                namespace, "-A", "OUTPUT", "-d", destination, "-m", "statistic", "--mode", "nth",
                "--every", str(every), "--packet", str(every - 1), "-j", "DROP",
            )  # fmt: skip
        self.faults.append(f"loss {share:.0%} {direction.value}")

    def netem_delay(self, milliseconds: int) -> bool:
        """Delay every packet on the link both ways with tc netem; False when the kernel has no netem."""
        try:
            for namespace, device in ((self.orchestrator_ns, "toreceiver"), (self.receiver_ns, "toorch")):
                _run(
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    device,
                    "root",
                    "netem",
                    "delay",
                    f"{milliseconds}ms",
                    namespace=namespace,
                )
        except RuntimeError as error:
            if "unknown" not in str(error).lower():
                raise
            self.netem = False
            return False
        self.netem = True
        self.faults.append(f"delay {milliseconds}ms both")
        return True

    def queue(self, direction: Direction, queue: int = 0) -> None:
        """Send the link's packets going this way to an NFQUEUE (a delayer holds them; none: they pass)."""
        for namespace, destination in self._egress(direction):
            self._iptables(
                namespace, "-A", "OUTPUT", "-d", destination, "-j", "NFQUEUE", "--queue-num", str(queue),
                "--queue-bypass",
            )  # fmt: skip
        self.faults.append(f"queued for delay {direction.value}")

    def _count_dropped(self, namespace: str) -> int:
        listing = _run("iptables", "-w", "-L", "OUTPUT", "-n", "-v", "-x", namespace=namespace)
        return sum(int(line.split()[0]) for line in listing.splitlines() if " DROP " in f" {line} ")

    def heal(self) -> None:
        """Remove every fault from the link (counting the packets the rules dropped)."""
        for namespace in (self.orchestrator_ns, self.receiver_ns):
            self.dropped += self._count_dropped(namespace)
            self._iptables(namespace, "-F", "OUTPUT")
        if self.netem:
            for namespace, device in ((self.orchestrator_ns, "toreceiver"), (self.receiver_ns, "toorch")):
                _run("tc", "qdisc", "del", "dev", device, "root", namespace=namespace)
        self.faults.append("heal")


def _link(root_device: str, namespace: str, device: str, root_ip: str, ns_ip: str) -> None:
    _run("ip", "link", "add", root_device, "type", "veth", "peer", "name", device, "netns", namespace)
    _run("ip", "addr", "add", f"{root_ip}/30", "dev", root_device)
    _run("ip", "link", "set", root_device, "up")
    _run("ip", "-n", namespace, "addr", "add", f"{ns_ip}/30", "dev", device)
    _run("ip", "-n", namespace, "link", "set", device, "up")


def require_namespaces() -> None:
    """Skip the test, with the reason, where namespaces or the tools cannot be used."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add)")
    missing = [tool for tool in ("ip", "iptables") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (.ci/run installs them)")


@contextmanager
def topology() -> Iterator[Topology]:
    """Create the two namespaces and their links; delete them afterwards, even on failure."""
    require_namespaces()
    tag = f"{os.getpid()}x{next(_counter)}"
    names: list[str] = []
    try:
        for role in ("orch", "recv"):
            name = f"df{role}{tag}"
            done = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                pytest.skip(f"the kernel refused a network namespace: {done.stderr.strip()}")
            names.append(name)
            _run("ip", "-n", name, "link", "set", "lo", "up")
        net = _free_subnet()
        top = Topology(names[0], names[1], net)
        _link(f"dfo{tag}", names[0], "toroot", top.host(1), top.host(2))
        _link(f"dfr{tag}", names[1], "toroot", top.host(5), top.host(6))
        _run(
            "ip",
            "-n",
            names[0],
            "link",
            "add",
            "toreceiver",
            "type",
            "veth",
            "peer",
            "name",
            "toorch",
            "netns",
            names[1],
        )
        _run("ip", "-n", names[0], "addr", "add", f"{top.host(9)}/30", "dev", "toreceiver")
        _run("ip", "-n", names[0], "link", "set", "toreceiver", "up")
        _run("ip", "-n", names[1], "addr", "add", f"{top.host(10)}/30", "dev", "toorch")
        _run("ip", "-n", names[1], "link", "set", "toorch", "up")
        yield top
    finally:
        # Deleting a namespace deletes its veth ends, and with them their peers in the root namespace.
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
