"""``decisionflow whoami`` against a real orchestrator with authentication on: the principal the
credentials stand for, its roles and its groups (GetCaller), and the refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from decisionflow_server.runtime.auth import Role, issue_token
from tests.support.review_cli import Cli

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def _with_pia(make_cli: Callable[..., Cli], directory: Path) -> Cli:
    """A stack whose credentials file also holds pia (reviewer and author, in the groups payments-leads and
    emea), and the CLI able to run as pia."""
    token = issue_token(directory / "credentials.json", "pia", [Role.REVIEWER, Role.AUTHOR], ["payments-leads", "emea"])
    cli = make_cli()  # started after the token is issued: the server reads the file as it starts
    cli.tokens["pia"] = directory / "pia.token"
    cli.tokens["pia"].write_text(token + "\n")
    return cli


def test_whoami_prints_the_principal_its_roles_and_its_groups(make_cli: Callable[..., Cli], tmp_path: Path) -> None:
    cli = _with_pia(make_cli, tmp_path)

    run = cli("whoami", principal="pia")

    assert run.exit_code == 0, run.stderr
    assert run.document == {
        "command": "whoami",
        "principal": "pia",
        "roles": ["reviewer", "author"],
        "groups": ["emea", "payments-leads"],
    }
    assert run.stderr == "pia: roles reviewer, author; groups emea, payments-leads\n"

    plain = cli("whoami", principal="rita")
    assert (plain.exit_code, plain.document["groups"]) == (0, [])
    assert plain.stderr == "rita: roles reviewer; groups (none)\n"


def test_whoami_runs_as_a_separate_process(make_cli: Callable[..., Cli], tmp_path: Path) -> None:
    cli = _with_pia(make_cli, tmp_path)
    argv = [sys.executable, "-m", "decisionflow_cli", "whoami", "--target", cli.target]

    done = subprocess.run(
        [*argv, "--token-file", str(cli.tokens["pia"])], capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["groups"] == ["emea", "payments-leads"]


def test_whoami_without_credentials_is_refused_exit_3(make_cli: Callable[..., Cli]) -> None:
    run = make_cli()("whoami", principal=None)

    assert run.exit_code == 3
    assert run.error["code"] == "UNAUTHENTICATED"
    assert "give a valid token" in run.stderr
