"""Install and build what the suite's tests would otherwise install or build on first use, before they ask.

``make test`` runs this beside its lint and type checks (which keep one core busy), so that a fresh
clone's test workers do not stand waiting on downloads: the Debian base image (mmdebstrap) and the
images built on it, the pinned checkov, kustomize, podman-compose and Patroni, and the TypeScript
client. Each step is the very function its fixture calls, under the same lock and stamp, so a test
that gets there first waits for the step or finds it done, and nothing is made twice.

A step this machine cannot take (no podman, no node, not root) is reported and left to its tests,
which skip or fail as they always do; so is one that fails. Exit status: 0 unless interrupted.

    python -m tests.support.prepare
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.campaigns import patroni
from tests.support import containers, kubernetes, typescript

Step = tuple[str, Callable[[], object]]


def _images() -> None:
    reason = containers.why_podman_cannot_run()
    if reason is not None:
        raise pytest.skip.Exception(reason)
    base = containers.ensure_base_image().reference
    with tempfile.TemporaryDirectory(prefix="decisionflow-prepare-") as folder, containers.machine_lock("build"):
        containers.build_image(base, Path(folder), containers.IMAGE_TAG)
    containers.build_context(containers.POSTGRES_CONTEXT, base, containers.POSTGRES_TAG)
    containers.build_context(containers.PROMETHEUS_CONTEXT, base, containers.PROMETHEUS_TAG)


def _podman_compose() -> None:
    reason = containers.why_podman_cannot_run()
    if reason is not None:
        raise pytest.skip.Exception(reason)
    containers.ensure_podman_compose()


def _typescript() -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise pytest.skip.Exception("node and npm are not on the PATH")
    typescript.build_client(node, npm)


# Two lanes: podman's builds one after another (they share podman's store and its build lock), and the
# downloads of the other tools beside them.
LANES: tuple[tuple[Step, ...], ...] = (
    (("the images (base, service, PostgreSQL and Prometheus stand-ins)", _images),),
    (
        ("checkov", kubernetes.ensure_checkov),
        ("kustomize", kubernetes.ensure_kustomize),
        ("podman-compose", _podman_compose),
        ("Patroni", patroni.install_patroni),
        ("the TypeScript client", _typescript),
    ),
)


def _run(lane: tuple[Step, ...]) -> None:
    for name, step in lane:
        started = time.monotonic()
        try:
            step()
        except (pytest.skip.Exception, pytest.fail.Exception, AssertionError, OSError) as exc:
            reason = str(exc).strip().splitlines()[:1] or [type(exc).__name__]
            print(f"prepare: {name}: left to its tests ({reason[0][:300]})", flush=True)
            continue
        print(f"prepare: {name} ready in {time.monotonic() - started:.1f} s", flush=True)


def main() -> int:
    """Take every step, two lanes at a time; report each one's time or why it was left to its tests."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(LANES)) as lanes:
        for done in [lanes.submit(_run, lane) for lane in LANES]:
            done.result()
    print(f"prepare: done in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
