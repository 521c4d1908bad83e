"""The repository's Dockerfile built and run with podman, on a Debian base made here.

No container registry is reachable from CI, so the base image is made from Debian's packages with
``mmdebstrap`` (bookworm, minbase plus Python 3.11, its venv module and the CA certificates) and
imported into podman as ``localhost/decisionflow-base:KEY``, where KEY is a hash of the suites, the
package list and the options: the base is made once per machine and kept in podman's image store
until one of those changes. The Dockerfile is then built on it (``--build-arg BASE=...``); podman's
layer cache keeps a rebuild of an unchanged checkout to seconds.

pip inside the build sees the machine's own package index configuration and CA bundle (``pip config
list``): written into a folder mounted into the build only (``--volume``), found through the
Dockerfile's ``PIP_CONFIG_FILE`` build argument, never kept in the image.

This machine's podman needs ``--runtime runc`` (crun refuses its cgroup mode) and fixed ulimits
(raising them is refused). Without podman, runc or mmdebstrap, or not as root, the tests skip with the
reason, unless ``DECISIONFLOW_REQUIRE_PODMAN=1`` or ``CI=true`` (as in .ci/run), where they fail.

The figures (the base's and the image's build times, the image's size) are printed in the session's
closing summary, from every xdist worker.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRE = "DECISIONFLOW_REQUIRE_PODMAN"
# What the containers need on this machine (see the module docstring).
PODMAN = ("podman", "--runtime", "runc")
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")
CACHE = Path("/var/tmp/decisionflow-containers")

BASE_SUITE = "bookworm"
BASE_SOURCES = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
BASE_OPTIONS = (
    "--variant=minbase",
    # Documentation and translations are of no use in an image (the copyright files stay).
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
)
# Where the build's pip configuration is mounted (the Dockerfile's PIP_CONFIG_FILE names a file in it).
BUILD_PIP = "/run/decisionflow-build"
FIGURE = "container figure"


def _required() -> bool:
    return os.environ.get(REQUIRE) == "1" or os.environ.get("CI") == "true"


def unavailable(reason: str) -> None:
    """Skip with reason, or fail where the container tests are required (CI)."""
    if _required():
        pytest.fail(f"{reason}; required here (CI=true or {REQUIRE}=1)")
    pytest.skip(reason)


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one podman command (with the runtime this machine needs) to its end."""
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False)


def why_podman_cannot_run() -> str | None:
    """Why rootful podman, runc and mmdebstrap cannot run the container tests here, or None when they can."""
    missing = [tool for tool in ("podman", "runc", "mmdebstrap") if shutil.which(tool) is None]
    if missing:
        names = " ".join(missing)
        return f"the container tests need {names}, missing here (Debian: apt-get install {names})"
    if os.geteuid() != 0:
        return "the container tests run rootful podman and mmdebstrap: they need root"
    info = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout=60)
    if info.returncode != 0:
        return f"podman info failed: {info.stderr.strip()[-500:]}"
    return None


@contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Hold a lock shared by every test session on this machine (xdist workers and other checkouts)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class Built:
    """An image in podman's store: its reference, how long making it took, and whether a cache served it."""

    reference: str
    seconds: float
    cached: str

    def size(self) -> int:
        """The image's size in bytes, as podman reports it."""
        done = podman("image", "inspect", "--format", "{{.Size}}", self.reference)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip())


def base_key() -> str:
    """The base image's cache key: a hash of everything that decides its content."""
    made_of = json.dumps([BASE_SUITE, BASE_SOURCES, BASE_PACKAGES, BASE_OPTIONS])
    return hashlib.sha256(made_of.encode()).hexdigest()[:16]


def _make_base(reference: str) -> None:
    tarball = CACHE / f"base-{base_key()}.tar"
    argv = [
        "mmdebstrap",
        "--quiet",
        *BASE_OPTIONS,
        f"--include={','.join(BASE_PACKAGES)}",
        BASE_SUITE,
        str(tarball),
        *BASE_SOURCES,
    ]
    try:
        made = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
        assert made.returncode == 0, f"mmdebstrap failed:\n{made.stderr[-4000:]}"
        imported = podman("import", "--quiet", str(tarball), reference, timeout=300)
        assert imported.returncode == 0, imported.stderr
    finally:
        tarball.unlink(missing_ok=True)


@dataclass(frozen=True)
class PipForBuild:
    """The machine's pip configuration for one build: the podman build arguments that pass it in."""

    arguments: tuple[str, ...]


# pip reads its configuration files in this order, then its PIP_ variables: a later one wins.
_PIP_PRECEDENCE = {"global": 0, "user": 1, "site": 2, ":env:": 3}


def _pip_settings() -> dict[str, str]:
    """The pip settings in force here (files and PIP_ variables), as ``pip config list`` prints them."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
    )
    found = [re.fullmatch(r"([^.]*)\.([\w-]+)='(.*)'", line.strip()) for line in listed.stdout.splitlines()]
    entries = sorted((_PIP_PRECEDENCE.get(m[1], 0), m[2].replace("_", "-"), m[3]) for m in found if m)
    return {key: value for _, key, value in entries}


def pip_for_build(folder: Path) -> PipForBuild:
    """Write the machine's index settings and CA bundle into folder, return the arguments that mount
    it (and each local index or wheel folder it names) into the build and point pip at it."""
    settings = _pip_settings()
    mounts = [f"{folder}:{BUILD_PIP}:ro"]
    lines = ["[global]"]

    def local(path: str) -> str:
        # The mount point exists beforehand: the folder above it is mounted read-only.
        name = f"local-{len(mounts)}"
        (folder / name).mkdir()
        mounts.append(f"{path}:{BUILD_PIP}/{name}:ro")
        return f"{BUILD_PIP}/{name}"

    def where(location: str) -> str:
        if location.startswith("file://"):
            # A local index's pages link to its files relatively (../../files/...): its parent goes in.
            index = Path(location.removeprefix("file://"))
            return f"file://{local(str(index.parent))}/{index.name}" if index.exists() else ""
        if location.startswith("/"):
            return local(location) if Path(location).exists() else ""
        return location

    cert = settings.get("cert")
    if cert and Path(cert).is_file():
        shutil.copyfile(cert, folder / "ca.pem")
        lines.append(f"cert = {BUILD_PIP}/ca.pem")
    for key in ("index-url", "extra-index-url", "find-links"):
        if settings.get(key):
            locations = [where(location) for location in settings[key].split()]
            lines.append(f"{key} = {' '.join(filter(None, locations))}")
    for key in ("trusted-host", "proxy", "timeout", "default-timeout", "retries"):
        if settings.get(key):
            lines.append(f"{key} = {settings[key]}")
    (folder / "pip.conf").write_text("\n".join(lines) + "\n")
    volumes = [argument for mount in mounts for argument in ("--volume", mount)]
    return PipForBuild((*volumes, "--build-arg", f"PIP_CONFIG_FILE={BUILD_PIP}/pip.conf"))


def build_image(base: str, folder: Path, tag: str) -> tuple[Built, str]:
    """Build the repository's Dockerfile on base, return the image and podman's output."""
    pip = pip_for_build(folder)
    iidfile = folder / "image.id"
    argv = [
        "build",
        *ULIMITS,
        "--network",
        "host",
        "--pull=never",
        "--build-arg",
        f"BASE={base}",
        *pip.arguments,
        "--iidfile",
        str(iidfile),
        "--tag",
        tag,
        str(ROOT),
    ]
    started = time.monotonic()
    done = podman(*argv, timeout=900)
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"podman build failed:\n{output[-6000:]}"
    steps = len(re.findall(r"^STEP \d+/\d+", output, flags=re.MULTILINE))
    cached = len(re.findall(r"^--> Using cache ", output, flags=re.MULTILINE))
    return Built(iidfile.read_text().strip(), seconds, f"{cached} of {steps} steps from podman's cache"), output


@pytest.fixture(scope="session")
def podman_ready() -> None:
    """Podman, runc and mmdebstrap usable here (skips, or fails in CI, when not)."""
    reason = why_podman_cannot_run()
    if reason is not None:
        unavailable(reason)


@pytest.fixture(scope="session")
def base_image(podman_ready: None) -> Built:
    """The Debian base made with mmdebstrap, from the machine's cache when its key is there."""
    return ensure_base_image()


def ensure_base_image() -> Built:
    """The Debian base made with mmdebstrap unless the machine's cache holds its key."""
    reference = f"localhost/decisionflow-base:{base_key()}"
    with machine_lock("base"):
        started = time.monotonic()
        if podman("image", "exists", reference).returncode == 0:
            return Built(reference, time.monotonic() - started, "from the machine's cache")
        _make_base(reference)
        return Built(reference, time.monotonic() - started, "made with mmdebstrap")


@pytest.fixture(scope="session")
def image(base_image: Built, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The repository's Dockerfile built on the Debian base (one build at a time on this machine)."""
    folder = tmp_path_factory.mktemp("image-build")
    with machine_lock("build"):
        built, _ = build_image(base_image.reference, folder, IMAGE_TAG)
    return built


POSTGRES_CONTEXT = ROOT / "tests" / "containers" / "postgres"
PROMETHEUS_CONTEXT = ROOT / "tests" / "containers" / "prometheus"
NATS_CONTEXT = ROOT / "tests" / "containers" / "nats"
PODMAN_COMPOSE_REQUIREMENTS = ROOT / "tools" / "podman-compose" / "requirements.txt"
PODMAN_COMPOSE_VENV = ROOT / ".venvs" / "podman-compose"
IMAGE_TAG = "localhost/decisionflow:test"
POSTGRES_TAG = "localhost/decisionflow-postgres:test"
PROMETHEUS_TAG = "localhost/decisionflow-prometheus:test"
NATS_TAG = "localhost/decisionflow-nats:test"


def build_context(context: Path, base: str, tag: str) -> Built:
    """Build the Containerfile of context on base (one build at a time on this machine)."""
    started = time.monotonic()
    with machine_lock("build"):
        arguments = ["build", *ULIMITS, "--network", "host", "--pull=never", "--build-arg", f"BASE={base}"]
        done = podman(*arguments, "--tag", tag, str(context), timeout=900)
    assert done.returncode == 0, f"building {context.relative_to(ROOT)} failed:\n{(done.stdout + done.stderr)[-6000:]}"
    reference = done.stdout.strip().splitlines()[-1]
    cached = len(re.findall(r"^--> Using cache ", done.stdout, flags=re.MULTILINE))
    return Built(reference, time.monotonic() - started, f"{cached} steps from podman's cache")


@pytest.fixture(scope="session")
def postgres_image(base_image: Built) -> Built:
    """PostgreSQL 15 from Debian's packages on the same base, standing in for compose's postgres:15."""
    return build_context(POSTGRES_CONTEXT, base_image.reference, POSTGRES_TAG)


@pytest.fixture(scope="session")
def prometheus_image(base_image: Built) -> Built:
    """Prometheus from Debian's package on the same base, standing in for compose's prom/prometheus."""
    return build_context(PROMETHEUS_CONTEXT, base_image.reference, PROMETHEUS_TAG)


@pytest.fixture(scope="session")
def nats_image(base_image: Built) -> Built:
    """nats-server from Debian's package on the same base, standing in for compose's nats."""
    return build_context(NATS_CONTEXT, base_image.reference, NATS_TAG)


@pytest.fixture(scope="session")
def podman_compose(podman_ready: None) -> str:
    """The pinned podman-compose, installed into .venvs/podman-compose on first use."""
    return ensure_podman_compose()


def ensure_podman_compose() -> str:
    """The pinned podman-compose, installed into .venvs/podman-compose unless it is there."""
    wanted = hashlib.sha256(PODMAN_COMPOSE_REQUIREMENTS.read_bytes()).hexdigest()
    stamp = PODMAN_COMPOSE_VENV / ".installed"
    with machine_lock("podman-compose"):
        if not stamp.is_file() or stamp.read_text() != wanted:
            shutil.rmtree(PODMAN_COMPOSE_VENV, ignore_errors=True)
            venv.create(PODMAN_COMPOSE_VENV, with_pip=True)
            pip = [str(PODMAN_COMPOSE_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
            done = subprocess.run(
                [*pip, "-r", str(PODMAN_COMPOSE_REQUIREMENTS)], capture_output=True, text=True, timeout=600, check=False
            )
            if done.returncode != 0:
                shutil.rmtree(PODMAN_COMPOSE_VENV, ignore_errors=True)
                unavailable(f"podman-compose could not be installed: {done.stderr.strip().splitlines()[-1:]}")
            stamp.write_text(wanted)
    return str(PODMAN_COMPOSE_VENV / "bin" / "podman-compose")


def record_figure(record_property: Any, text: str) -> None:
    """Keep a figure for the session's closing summary (reported from xdist workers as well)."""
    record_property(FIGURE, text)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the container figures the tests recorded."""
    figures = [
        f"{report.nodeid.rsplit('::', 1)[-1]}: {value}"
        for reports in terminalreporter.stats.values()
        for report in reports
        if hasattr(report, "user_properties") and getattr(report, "when", "") == "call"
        for name, value in report.user_properties
        if name == FIGURE
    ]
    if figures:
        terminalreporter.section("containers: figures")
        for line in figures:
            terminalreporter.write_line(line)
