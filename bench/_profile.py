"""``--profile DIR``: sample a server process with py-spy while a load runs, and summarise the samples.

py-spy is not a dependency of the project: install it into the environment to use this option
(``.venv/bin/pip install py-spy``). Samples are taken only while the sampled thread holds the GIL
(``--gil``), so the tables show where the process spends CPU in Python, not where it waits.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SAMPLE_RATE = 200
ATTACH_SECONDS = 1.0
TOP = 30


def find_py_spy() -> str | None:
    """Return the py-spy executable: next to this interpreter, else on PATH; None when not installed."""
    beside = Path(sys.executable).with_name("py-spy")
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


class Profiler:
    """Records py-spy samples of one process per named phase into a directory."""

    def __init__(self, directory: Path, py_spy: str) -> None:
        self.directory = directory
        self._py_spy = py_spy
        directory.mkdir(parents=True, exist_ok=True)

    def for_workers(self, workers: int) -> Profiler:
        """The profiler of the run at this worker count (its own subdirectory)."""
        return Profiler(self.directory / f"workers-{workers}", self._py_spy)

    @contextmanager
    def record(self, pid: int, name: str) -> Iterator[None]:
        """Sample pid while the body runs; write NAME.raw (collapsed stacks) and NAME.top.txt."""
        raw = self.directory / f"{name}.raw"
        command = [self._py_spy, "record", "--pid", str(pid), "--format", "raw", "--output", str(raw)]
        # --subprocesses: with --workers the process serves nothing; its forked workers do.
        command += ["--rate", str(SAMPLE_RATE), "--nonblocking", "--gil", "--subprocesses"]
        with (self.directory / f"{name}.py-spy.log").open("wb") as log:
            sampler = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        # py-spy needs a moment to attach; samples taken before the load starts would dilute the table.
        time.sleep(ATTACH_SECONDS)
        try:
            yield
        finally:
            sampler.send_signal(signal.SIGINT)
            sampler.wait(60)
        if raw.exists():
            (self.directory / f"{name}.top.txt").write_text(top_functions(raw), encoding="utf-8")


# This project's packages, told apart by their first two path parts (orchestrator/store), or three for
# the shared package's layers (decisionflow_server/runtime/auth).
_OWN_PACKAGES = ("decisionflow", "decisionflow_server", "orchestrator", "effect_receiver", "reconciler", "bench")


def package_of(frame: str) -> str:
    """The package a py-spy frame (``function (path/to/file.py:line)``) belongs to: the distribution's
    top-level package (sqlalchemy, grpc, agent_framework, asyncio, whose ``Handle._run`` holds gRPC's
    Cython callbacks), this project's package and module, or ``<file>.py`` for a module py-spy names
    by its file alone (the standard library's); frames
    with no file are ``<native>``."""
    _, _, where = frame.rpartition(" (")
    path = where.rsplit(":", 1)[0]
    if not path or not path.endswith(".py"):
        return "<native>"
    parts = path.split("/")
    if parts[0] in _OWN_PACKAGES:
        return "/".join(parts[: 3 if parts[0] == "decisionflow_server" else 2])
    if len(parts) == 1:
        return parts[0]
    return parts[0]


def top_functions(raw: Path, limit: int = TOP) -> str:
    """Return the functions with the most samples, by own time and by inclusive time, from collapsed stacks."""
    own: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        total += samples
        frames = stack.split(";")
        own[frames[-1]] += samples
        packages[package_of(frames[-1])] += samples
        for frame in set(frames):
            inclusive[frame] += samples
    if total == 0:
        return "no samples\n"
    lines = [f"{total} samples (GIL held)", "", "by package of the innermost frame:"]
    lines += [f"{100 * n / total:6.1f}%  {name}" for name, n in packages.most_common(limit)]
    lines += ["", "by own time:"]
    lines += [f"{100 * n / total:6.1f}%  {frame}" for frame, n in own.most_common(limit)]
    lines += ["", "by inclusive time:"]
    lines += [f"{100 * n / total:6.1f}%  {frame}" for frame, n in inclusive.most_common(limit)]
    return "\n".join(lines) + "\n"
