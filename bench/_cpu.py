"""CPU time of the benchmark's server processes, read from /proc: a service is its process and the
worker processes it forked (``--workers``), so its CPU per call is visible beside each figure."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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
    """User and system CPU seconds pid has used so far (0 once it is gone)."""
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
