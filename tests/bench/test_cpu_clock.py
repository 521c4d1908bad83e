"""The bench reads a process's CPU to the nanosecond, every thread of it: in clock ticks (10 ms), a round of
a few calls on a fast processor read as no CPU at all."""

from __future__ import annotations

import errno
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from bench import _cpu

# The child spins in a new thread until that thread has used WORK_NS of CPU (by its own clock), then says
# how much it used: far less than a clock tick.
WORK_NS = 1_000_000
CHILD = f"""
import sys, threading, time

def spin():
    started = time.thread_time_ns()
    while time.thread_time_ns() - started < {WORK_NS}:
        pass
    used.append(time.thread_time_ns() - started)

for line in sys.stdin:
    used = []
    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    print(used[0], flush=True)
"""


@pytest.fixture
def child() -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            yield process
        finally:
            process.kill()


def _work(child: subprocess.Popen[str]) -> int:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("work\n")
    child.stdin.flush()
    return int(child.stdout.readline())


def test_cpu_seconds_count_each_piece_of_work_below_a_clock_tick_on_any_thread(
    child: subprocess.Popen[str],
) -> None:
    _work(child)  # the interpreter's start is behind it
    for _ in range(5):
        before = _cpu.cpu_seconds(child.pid)
        worked = _work(child)
        after = _cpu.cpu_seconds(child.pid)
        # The process used at least what its worker thread used, which has exited by now.
        assert after - before >= worked / 1e9 > 0


def test_cpu_nanoseconds_only_grow(child: subprocess.Popen[str]) -> None:
    readings = []
    for _ in range(3):
        _work(child)
        reading = _cpu.cpu_nanoseconds(child.pid)
        assert reading is not None
        readings.append(reading)
    assert readings == sorted(readings) and readings[0] < readings[-1]


def test_without_the_cpu_clock_the_ticks_of_proc_stat_are_read(
    child: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _work(child)

    def no_clock(clock: int) -> int:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(time, "clock_gettime_ns", no_clock)
    assert _cpu.cpu_nanoseconds(child.pid) is None
    # The child waits on its input meanwhile: its ticks do not move between the two reads.
    assert _cpu.cpu_seconds(child.pid) == _cpu.tick_cpu_seconds(child.pid)


def test_a_process_that_is_gone_has_no_cpu_clock_and_reads_as_none_used() -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True, text=True
    )
    pid = int(gone.stdout)
    assert _cpu.cpu_nanoseconds(pid) is None
    assert _cpu.cpu_seconds(pid) == 0.0
