"""Refusing new connections from chosen peer addresses at the listening socket, before gRPC accepts them.

gRPC's core closes a connection beyond its cap only after accepting it, and its Python API has no hook
at accept time: a peer that reconnects as fast as it is closed wins every freed slot. The connection
guard (decisionflow_server.runtime.connection_guard) therefore tells the kernel which addresses to refuse: a classic
BPF socket filter (SO_ATTACH_FILTER, no privilege needed) on the server's listening sockets drops a
connection request (a SYN without ACK) whose source address is one of them. The peer's connect()
waits for its SYN to be answered, as against a full backlog; connections already established and
every other address are untouched (an accepted socket inherits the filter, but only pure SYNs match).

Linux only; elsewhere ``refuse`` reports that it could not and the guard keeps to closing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import socket
import struct
from collections.abc import Iterable, Iterator

SO_ATTACH_FILTER = 26
SO_DETACH_FILTER = 27
# Offsets of a classic BPF load below zero reach the network header (linux/filter.h SKF_NET_OFF);
# those at zero and above are the TCP header, where a socket filter of a TCP socket starts.
_NET = -0x100000
# At most this many addresses are refused at once: the filter stays within the kernel's 4096
# instructions (an IPv6 address takes 9).
MAX_REFUSED = 400

# struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}: the instructions used below.
_LD_W_ABS = 0x20  # A = 32-bit word at k (network byte order)
_LD_B_ABS = 0x30  # A = byte at k
_AND_K = 0x54  # A &= k
_RSH_K = 0x74  # A >>= k
_JEQ_K = 0x15  # pc += (A == k) ? jt : jf
_JA = 0x05  # pc += k
_RET_K = 0x06  # keep k bytes of the packet (0: drop it)
_KEEP = 0xFFFFFFFF
_TCP_FLAGS = 13
_IP_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_SYN, _ACK = 0x02, 0x10


def _insn(code: int, k: int = 0, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _words(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[int]:
    packed = address.packed
    return [int.from_bytes(packed[i : i + 4], "big") for i in range(0, len(packed), 4)]


def program(addresses: Iterable[str]) -> bytes:
    """Return a classic BPF program that drops a connection request (SYN, no ACK) from any of addresses
    (IPv4 or IPv6; an IPv4-mapped IPv6 address is its IPv4 address) and keeps every other packet."""
    parsed = [ipaddress.ip_address(a) for a in addresses]
    v6 = [a for a in parsed if isinstance(a, ipaddress.IPv6Address)]
    v4 = [a for a in parsed if isinstance(a, ipaddress.IPv4Address)]
    v4 += [a.ipv4_mapped for a in v6 if a.ipv4_mapped is not None]
    v6 = [a for a in v6 if a.ipv4_mapped is None]
    keep, drop = _insn(_RET_K, _KEEP), _insn(_RET_K, 0)
    ipv4 = [_insn(_LD_W_ABS, _NET + 12)]
    for v4_address in v4:
        ipv4 += [_insn(_JEQ_K, _words(v4_address)[0], 0, 1), drop]
    ipv4.append(keep)
    ipv6: list[bytes] = []
    for address in v6:
        w = _words(address)
        # Four word comparisons; a mismatch jumps past the block's drop to the next address.
        ipv6 += [
            _insn(_LD_W_ABS, _NET + 8),
            _insn(_JEQ_K, w[0], 0, 7),
            _insn(_LD_W_ABS, _NET + 12),
            _insn(_JEQ_K, w[1], 0, 5),
            _insn(_LD_W_ABS, _NET + 16),
            _insn(_JEQ_K, w[2], 0, 3),
            _insn(_LD_W_ABS, _NET + 20),
            _insn(_JEQ_K, w[3], 0, 1),
            drop,
        ]
    ipv6.append(keep)
    head = [
        _insn(_LD_B_ABS, _TCP_FLAGS),
        _insn(_AND_K, _SYN | _ACK),
        _insn(_JEQ_K, _SYN, 1, 0),
        keep,  # not a connection request
        _insn(_LD_B_ABS, _NET),
        _insn(_RSH_K, 4),  # the IP version
        _insn(_JEQ_K, 4, 1, 0),
        _insn(_JA, len(ipv4)),  # not IPv4: to the IPv6 part
    ]
    return b"".join(head + ipv4 + ipv6)


def own_sockets() -> Iterator[tuple[int, int, socket.socket]]:
    """Yield (descriptor, inode, a duplicate of it) for each of this process's TCP sockets over IP (nothing
    where /proc is absent); each duplicate is closed once the next is asked for."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return
    for name in names:
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile
        if not link.startswith("socket:["):
            continue
        inode = int(link[len("socket:[") : -1])
        with duplicate_socket(int(name), inode) as sock:
            if (
                sock is not None
                and sock.type == socket.SOCK_STREAM
                and sock.family in (socket.AF_INET, socket.AF_INET6)
            ):
                yield int(name), inode, sock


def listening_sockets(port: int) -> list[tuple[int, int]]:
    """Return (descriptor, inode) of this process's listening TCP sockets on port (empty where /proc is absent)."""
    found = []
    for fd, inode, sock in own_sockets():
        with contextlib.suppress(OSError):
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) and sock.getsockname()[1] == port:
                found.append((fd, inode))
    return found


def refuse(port: int, addresses: Iterable[str]) -> int:
    """Make this process's listening sockets on port refuse new connections from addresses (none: accept
    all again); return how many sockets now do. Raises OSError when the kernel refuses the filter."""
    chosen = sorted(set(addresses))[:MAX_REFUSED]
    code = program(chosen) if chosen else b""
    done = 0
    for fd, inode in listening_sockets(port):
        with duplicate_socket(fd, inode) as sock:
            if sock is None:
                continue
            if chosen:
                _attach(sock, code)
            else:
                with contextlib.suppress(OSError):  # ENOENT: no filter attached
                    sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
            done += 1
    return done


def _attach(sock: socket.socket, code: bytes) -> None:
    instructions = (ctypes.c_ubyte * len(code)).from_buffer_copy(code)
    # struct sock_fprog {unsigned short len; struct sock_filter *filter;}: the kernel copies the program.
    fprog = struct.pack("HP", len(code) // 8, ctypes.addressof(instructions))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


@contextlib.contextmanager
def duplicate_socket(fd: int, inode: int) -> Iterator[socket.socket | None]:
    """Yield a duplicate of fd as a socket if fd is still the socket inode (gRPC may have closed it and
    the number been reused), else None; the duplicate is closed after, the original never touched."""
    try:
        duplicate = os.dup(fd)
    except OSError:
        yield None
        return
    try:
        if os.fstat(duplicate).st_ino != inode:
            yield None
            return
        sock = socket.socket(fileno=duplicate)
    except OSError:
        os.close(duplicate)
        yield None
        return
    with sock:
        yield sock
