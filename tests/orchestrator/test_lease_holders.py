"""Which lease holders a process knows have ended, with real processes: a running one (this one, a
child) has not; a child that exited and was reaped has, as has a holder whose pid another process
now has; a zombie has ended; another host, another PID space, or a name without the space and start
time is never known to have ended."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest

from orchestrator.holders import LeaseHolder, start_ticks


@pytest.fixture
def me() -> LeaseHolder:
    holder = LeaseHolder.this_process()
    assert holder is not None, "Linux: /proc gives this process's start time and PID namespace"
    return holder


def _child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _name_of(me: LeaseHolder, pid: int) -> str:
    start = start_ticks(pid)
    assert start is not None
    return replace(me, pid=pid, start=start).name


def test_a_name_reads_back_as_the_holder_it_names(me: LeaseHolder) -> None:
    assert LeaseHolder.parse(me.name) == me
    host, pid, instance = me.name.split(":")
    assert (host, pid) == (me.host, str(me.pid)) and instance == f"{me.space}.{me.start}"


def test_a_running_process_has_not_ended_and_an_exited_one_has(me: LeaseHolder) -> None:
    assert not me.has_ended(me.name)
    child = _child()
    try:
        name = _name_of(me, child.pid)
        assert not me.has_ended(name)
        child.kill()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, left unreaped
        assert me.has_ended(name)  # a zombie has ended
    finally:
        child.kill()
        child.wait()
    assert me.has_ended(name)


def test_a_pid_taken_by_another_process_does_not_keep_the_old_holder_alive(me: LeaseHolder) -> None:
    child = _child()
    try:
        start = start_ticks(child.pid)
        assert start is not None
        # The same pid, started at another time: the holder was another process, now gone.
        assert me.has_ended(replace(me, pid=child.pid, start=start + 1).name)
        assert me.has_ended(replace(me, start=me.start - 1).name)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize(
    "other",
    [
        lambda me: replace(me, host=me.host + "-other", pid=2**22 + 7).name,  # another host
        lambda me: replace(me, space="0" * 8 if me.space != "0" * 8 else "1" * 8, pid=2**22 + 7).name,
        lambda me: f"{me.host}:{2**22 + 7}:0a0b0c",  # a name without space and start (an older release)
        lambda me: "orchestrator",
    ],
    ids=["another-host", "another-pid-space", "older-name", "bare-name"],
)
def test_a_holder_this_process_cannot_judge_is_never_known_to_have_ended(me: LeaseHolder, other: object) -> None:
    assert callable(other)
    name = other(me)
    assert start_ticks(2**22 + 7) is None  # no process has that pid: only the name's form decides
    assert not me.has_ended(name)
