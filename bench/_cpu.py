"""CPU time of the benchmark's server processes: a service is its process and the worker processes it
forked (``--workers``), so its CPU per call is visible beside each figure.

CPU time is read in nanoseconds, never in clock ticks. The user and system times of /proc/PID/stat count
in ticks of 1/``SC_CLK_TCK`` s (10 ms here): a round of a few calls on a fast processor used no tick and
read as no CPU at all. /proc/PID/schedstat counts nanoseconds, but for one thread: a process's file is its
main thread's, and a gRPC server works on others (measured: 0.03 s in schedstat against 0.38 s in stat
for a process that spun in a second thread). The process's own CPU-time clock holds what the scheduler
counted for every thread, those that have exited included, in nanoseconds: Linux derives its id from the
pid (the id clock_getcpuclockid(3) returns, computed here by ``process_clock_id``), and a process may read
the clock of any process it can see. Where it cannot be read, the ticks of /proc/PID/stat are the fallback.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# linux/posix-timers.h: a CPU clock of a whole process is ~pid << 3 with the clock kind in the low bits;
# CPUCLOCK_SCHED is the scheduler's runtime in nanoseconds (user and system together).
_CPUCLOCK_SCHED = 2


def process_clock_id(pid: int) -> int:
    """Return the id of pid's CPU-time clock (all its threads), as clock_getcpuclockid(3) gives it on Linux."""
    return (~pid << 3) | _CPUCLOCK_SCHED


def cpu_nanoseconds(pid: int) -> int | None:
    """Nanoseconds of CPU (user and system, every thread, exited ones included) pid has used so far, read
    from its CPU-time clock; None where that clock cannot be read (not Linux, or pid is gone)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return time.clock_gettime_ns(process_clock_id(pid))
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: fields start after the last ')'.
    return text[text.rindex(")") + 2 :].split()


def children(pid: int) -> list[int]:
    """Return the processes whose parent is pid."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry.name))
    return sorted(found)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds pid has used so far: from its CPU-time clock to the nanosecond, else
    from the ticks of /proc/PID/stat (0 once it is gone)."""
    nanoseconds = cpu_nanoseconds(pid)
    if nanoseconds is not None:
        return nanoseconds / 1e9
    return tick_cpu_seconds(pid)


def tick_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds pid has used so far, in clock ticks from /proc/PID/stat (0 once it is gone)."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3 (state).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class CpuMeter:
    """The CPU seconds of each named service: its process and the workers it forked at start."""

    def __init__(self, services: Mapping[str, int]) -> None:
        # Workers are forked at start and live as long as their parent: read the tree once.
        self.processes = {name: [pid, *children(pid)] for name, pid in services.items()}

    def snapshot(self) -> dict[str, float]:
        """Return each service's CPU seconds so far."""
        return {name: sum(cpu_seconds(pid) for pid in pids) for name, pids in self.processes.items()}
