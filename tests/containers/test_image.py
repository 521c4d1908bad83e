"""The repository's Dockerfile built with podman on the Debian base CI makes (tests/support/containers.py),
then looked at from inside: the lock was enough (the hash-checked install succeeded, pip check passes,
the console extra's pins are met), nothing outside the lock and this repository is installed, the
build's pip configuration stayed out of the image, and the image runs as uid 10001."""

from __future__ import annotations

import json
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from tests.containers.test_image_lock import LOCK, locked
from tests.support.containers import BUILD_PIP, ULIMITS, Built, podman, record_figure

pytestmark = [pytest.mark.slow, pytest.mark.containers]

# The installer the base's venv module brings (its version is the base's, not the lock's).
BOOTSTRAP = {"pip"}
# Every requirement of a distribution with its extras, checked against what is installed (pip check
# reads no extra); packaging comes from the lock (wheel needs it).
_EXTRAS_MET = """
import json, sys
from importlib.metadata import distribution, version, PackageNotFoundError
from packaging.requirements import Requirement
unmet = []
for name, extra in (("decisionflow", "console"), ("decisionflow", None), ("decisionflow-client", None)):
    for text in distribution(name).requires or []:
        req = Requirement(text)
        env = {"extra": extra or ""}
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        try:
            installed = version(req.name)
        except PackageNotFoundError:
            unmet.append(f"{name}: {req} (not installed)")
            continue
        if not req.specifier.contains(installed, prereleases=True):
            unmet.append(f"{name}: {req} (installed {installed})")
print(json.dumps(unmet))
"""


def _in_image(image: Built, *argv: str, user: str | None = None) -> str:
    """Run one command in a fresh container of the image (no network, read-only root) and return its output."""
    as_user = ["--user", user] if user else []
    done = podman(
        "run", "--rm", *ULIMITS, "--network", "none", "--read-only", *as_user, image.reference, *argv, timeout=120
    )
    assert done.returncode == 0, f"{argv} in the image failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_image_builds_from_the_lock_alone_and_holds_nothing_else(
    image: Built, base_image: Built, record_property: Any
) -> None:
    size = image.size()
    record_figure(
        record_property,
        f"image {size / 1e6:.0f} MB, built in {image.seconds:.1f} s ({image.cached}); "
        f"Debian base {base_image.seconds:.1f} s ({base_image.cached})",
    )
    # The build's own pip check passed (or it would have failed); the extras pip check skips:
    assert json.loads(_in_image(image, "python3", "-c", _EXTRAS_MET)) == []
    assert "No broken requirements found." in _in_image(image, "pip", "check")

    installed: dict[str, str] = {
        canonicalize_name(d["name"]): d["version"]
        for d in json.loads(_in_image(image, "pip", "list", "--format", "json", "--disable-pip-version-check"))
    }
    lock = {name: str(version) for name, (version, _) in locked().items()}
    outside = sorted(set(installed) - set(lock) - {"decisionflow", "decisionflow-client"} - BOOTSTRAP)
    assert not outside, f"installed but not in {LOCK.name}: {outside}"
    assert {name: installed.get(name) for name in lock} == lock, f"the image's versions differ from {LOCK.name}"


def test_the_image_keeps_none_of_the_builds_pip_configuration_and_runs_as_10001(image: Built) -> None:
    config = podman("image", "inspect", "--format", "{{json .Config}}", image.reference)
    assert config.returncode == 0, config.stderr
    settings = json.loads(config.stdout)
    assert settings["User"] == "10001:10001"
    assert not [e for e in settings.get("Env", []) if e.startswith("PIP_CONFIG_FILE=")]
    # What the build mounted there is gone: the mount point alone may stay, empty.
    assert _in_image(image, "find", BUILD_PIP, "-mindepth", "1", "-maxdepth", "1").strip() == ""
    pip_config = _in_image(image, "pip", "config", "list")
    assert not [line for line in pip_config.splitlines() if any(k in line for k in ("cert", "index", "find-links"))]
    user = "uid=10001(decisionflow) gid=10001(decisionflow) groups=10001(decisionflow)"
    assert _in_image(image, "id").strip() == user
