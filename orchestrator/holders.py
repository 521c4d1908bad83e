"""Who holds an attempt lease (``host:pid:instance``), and whether that holder is a process of this
host that has ended, so that its lease may be taken at once instead of waited out.

A process id names the same process for two processes only within one kernel boot and one PID
namespace: two containers with the same host name (a fixed ``hostname``, host networking) each have
a process 1. So the instance part of a name says where its pid is meaningful, and which process it
was:

    instance = SPACE.START
    SPACE    the first 8 hex digits of SHA-256(boot id, PID namespace): equal exactly for the processes
             whose pids name the same processes
    START    the process's start time in clock ticks after boot (/proc/PID/stat, field 22)

A holder has ended here when its host and SPACE are this process's and either no process has its
pid, or the process that has it started at another time (the pid was reused; it is not the holder).
Anything else is not known to have ended and its lease is waited out, as for another replica's:
another host, another PID namespace (a container restarted gets a new one), a live process (this
one included, or a sibling worker), a name without these parts, a system without /proc.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
# /proc/PID/stat: the fields after the command name (which may hold spaces, so it is cut at its
# closing parenthesis) start with field 3, the state; the start time is field 22.
_STATE_FIELD, _START_FIELD = 3 - 3, 22 - 3
# A process that has exited and waits to be reaped (zombie), or is being reaped.
_ENDED_STATES = ("Z", "X")


def start_ticks(pid: int, proc: Path = PROC) -> int | None:
    """Return when process pid started (clock ticks after boot); None when no running process has that pid
    (none at all, or one that has exited and waits to be reaped)."""
    try:
        stat = (proc / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rpartition(")")[2].split()
    if fields[_STATE_FIELD] in _ENDED_STATES:
        return None
    return int(fields[_START_FIELD])


def pid_space(proc: Path = PROC) -> str | None:
    """Return the SPACE of this process's names, or None where it cannot be known (no /proc)."""
    try:
        boot_id = (proc / "sys" / "kernel" / "random" / "boot_id").read_text(encoding="ascii").strip()
        namespace = os.stat(proc / "self" / "ns" / "pid").st_ino
    except OSError:
        return None
    return hashlib.sha256(f"{boot_id}|{namespace}".encode()).hexdigest()[:8]


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """One orchestrator process as the holder of attempt leases."""

    host: str
    pid: int
    space: str
    start: int

    @property
    def name(self) -> str:
        """The name its leases are taken under: ``host:pid:SPACE.START``."""
        return f"{self.host}:{self.pid}:{self.space}.{self.start}"

    @classmethod
    def parse(cls, name: str) -> LeaseHolder | None:
        """Return the holder a name written by ``name`` stands for; None for any other form."""
        host, _, rest = name.partition(":")
        pid, _, instance = rest.partition(":")
        space, _, start = instance.partition(".")
        if not (host and pid.isdigit() and len(space) == 8 and start.isdigit()):
            return None
        return cls(host, int(pid), space, int(start))

    @classmethod
    def this_process(cls, proc: Path = PROC) -> LeaseHolder | None:
        """Return this process as a holder; None where its start or PID namespace cannot be read."""
        space, start = pid_space(proc), start_ticks(os.getpid(), proc)
        if space is None or start is None:
            return None
        return cls(socket.gethostname(), os.getpid(), space, start)

    def has_ended(self, name: str, proc: Path = PROC) -> bool:
        """True only when name is a holder on this host, in this PID space, whose process has ended."""
        other = LeaseHolder.parse(name)
        if other is None or (other.host, other.space) != (self.host, self.space):
            return False
        if (other.pid, other.start) == (self.pid, self.start):
            return False  # this very process: alive
        return start_ticks(other.pid, proc) != other.start
