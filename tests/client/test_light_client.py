"""The light client distribution (clients/python) on its own: built into a fresh virtual environment,
it brings only its six pinned dependencies, none of the servers' packages, and runs the async
example against real services."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.client_examples import ExampleServices, check_story

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
SERVER_ONLY = ("agent_framework", "sqlalchemy", "alembic", "psycopg", "grpc_tools", "opentelemetry")
# What python -m venv puts in every environment, before anything is installed.
BARE = {"pip", "setuptools"}


def _pins(pyproject: Path) -> dict[str, str]:
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return dict(d.split("==") for d in dependencies if "==" in d and "[" not in d)


def test_the_light_client_pins_what_the_server_pins() -> None:
    client, server = _pins(CLIENT / "pyproject.toml"), _pins(ROOT / "pyproject.toml")

    assert sorted(client) == [
        "cryptography", "googleapis-common-protos", "grpcio", "grpcio-status", "protobuf", "tenacity"
    ]  # fmt: skip
    assert {name: server[name] for name in client} == client
    assert server["decisionflow-client"] == tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]["version"]


@pytest.mark.slow
def test_the_light_client_installs_alone_and_runs_the_example(
    tmp_path: Path, example_services: ExampleServices
) -> None:
    # A copy, so the build writes nothing into the working tree.
    source = tmp_path / "client"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(source)],
        check=True,
        timeout=600,
        cwd=tmp_path,
    )

    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=tmp_path,
    )
    installed = {entry["name"].lower(): entry["version"] for entry in json.loads(listed.stdout)}
    probe = "import importlib.util as u, sys; print([m for m in sys.argv[1:] if u.find_spec(m)])"
    found = subprocess.run(
        [python, "-c", probe, *SERVER_ONLY], capture_output=True, text=True, check=True, timeout=60, cwd=tmp_path
    )
    run = subprocess.run(
        [python, str(ROOT / "examples" / "approve_async.py"), example_services.target],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )

    expected = {"decisionflow-client": "0.1.0", **_pins(CLIENT / "pyproject.toml")}
    dependencies = {name: version for name, version in installed.items() if name not in BARE}
    assert {name: dependencies.get(name) for name in expected} == expected
    # Beyond the pins only what they need themselves (typing-extensions, ...), and nothing of the servers'.
    assert not {"agent-framework-core", "sqlalchemy", "alembic", "psycopg", "grpcio-tools"} & set(installed)
    assert found.stdout.strip() == "[]", found.stdout
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    check_story(run.stdout, example_services)
