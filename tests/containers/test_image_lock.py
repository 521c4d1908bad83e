"""The image's lock (requirements/image.lock) against what it must cover, without building anything:
every pin of the server distribution (with its console extra) and of the light client is in the lock
at the same version, every locked package carries its hashes, the build backend is locked too, the
trial and development extras are not, and the Dockerfile installs from the lock in hash-checking mode
on a base pinned by digest. tests/containers/test_image.py builds the image and checks the rest
(the lock is closed under dependencies, pip check passes, nothing else is installed)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "image.lock"
DOCKERFILE = ROOT / "Dockerfile"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CLIENT = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())
OURS = {"decisionflow", "decisionflow-client"}
# The image is Linux with CPython 3.11 (the Dockerfile's base, and CI's Debian base).
LINUX = {key: str(value) for key, value in default_environment().items()} | {
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
}


def locked() -> dict[str, tuple[Version, list[str]]]:
    """Each locked package's canonical name, mapped to its pinned version and its hashes."""
    packages: dict[str, tuple[Version, list[str]]] = {}
    for entry in re.split(r"\n(?=\S)", LOCK.read_text()):
        found = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", entry)
        if found:
            hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", entry)
            packages[canonicalize_name(found[1])] = (Version(found[2]), hashes)
    return packages


def image_requirements() -> list[Requirement]:
    """What the image installs from this repository: the server's pins with its console extra, the client's."""
    pins = [*PROJECT["project"]["dependencies"], *PROJECT["project"]["optional-dependencies"]["console"]]
    pins += CLIENT["project"]["dependencies"]
    return [r for r in map(Requirement, pins) if r.marker is None or r.marker.evaluate(LINUX)]


def test_every_pin_of_the_image_is_locked_at_its_version_with_hashes() -> None:
    lock = locked()
    missing, different = [], []
    for requirement in image_requirements():
        name = canonicalize_name(requirement.name)
        if name in OURS:
            continue
        if name not in lock:
            missing.append(str(requirement))
        elif not requirement.specifier.contains(lock[name][0], prereleases=True):
            different.append(f"{requirement} but the lock has {lock[name][0]}")
    assert not missing and not different, (
        f"run tools/lock_image.sh: not in the lock {missing}; at another version {different}"
    )
    unhashed = sorted(name for name, (_, hashes) in lock.items() if not hashes)
    assert not unhashed, f"locked without a hash: {unhashed}"


def test_the_build_backend_is_locked_and_satisfies_both_distributions() -> None:
    lock = locked()
    for project in (PROJECT, CLIENT):
        for backend in map(Requirement, project["build-system"]["requires"]):
            name = canonicalize_name(backend.name)
            assert name in lock, f"{backend} (build-system) is not in the lock"
            assert backend.specifier.contains(lock[name][0]), (str(backend), lock[name][0])


def test_neither_the_trial_provider_nor_a_development_tool_is_locked() -> None:
    lock = locked()
    needed = {canonicalize_name(r.name) for r in image_requirements()}
    for extra in ("trial", "dev"):
        pins = PROJECT["project"]["optional-dependencies"][extra]
        extras = {canonicalize_name(Requirement(pin).name) for pin in pins}
        # A development tool the runtime also needs (pyyaml, through agent-framework-core) may stay.
        assert not (extras & set(lock)) - needed - {"pyyaml"}, (extra, sorted((extras & set(lock)) - needed))
    assert not OURS & set(lock), "the repository's own distributions are installed from the build context"


def test_the_dockerfile_installs_from_the_lock_with_hashes_on_a_base_pinned_by_digest() -> None:
    text = DOCKERFILE.read_text()
    [base] = re.findall(r"^ARG BASE=(\S+)$", text, flags=re.MULTILINE)
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", base), f"the base is not pinned by digest: {base}"
    assert re.search(r"^FROM \$\{?BASE\}?$", text, flags=re.MULTILINE), "the base is not the build argument"
    assert "COPY requirements/image.lock requirements/image.lock" in text
    assert "pip install --require-hashes --only-binary :all: -r requirements/image.lock" in text
    [ours] = [line for line in text.splitlines() if "./clients/python '.[console]'" in line]
    assert "--no-deps" in ours and "--no-build-isolation" in ours, ours
    assert "pip check" in text
    # The requirement the lock serves: CPython 3.11, as requires-python of both distributions allows.
    for project in (PROJECT, CLIENT):
        assert SpecifierSet(project["project"]["requires-python"]).contains("3.11")
