"""The TypeScript client's GetCaller against a real orchestrator with authentication on: the
principal, its roles and the groups its credentials file entry lists."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from decisionflow_server.runtime.auth import Role, issue_token
from decisionflow_server.runtime.server_security import ServerSecurity
from tests.support.stack import Stack
from tests.support.typescript import TypeScriptPackage

SCRIPT = """
import { Role, reviewClient } from "./dist/src/index.js";
const [target, token] = process.argv.slice(1);
const caller = await reviewClient(target, { token }).getCaller({});
const roles = caller.roles.map((role) => Role[role]);
console.log(JSON.stringify({ principal: caller.principal, roles, groups: caller.groups }));
"""


@pytest.mark.slow
def test_get_caller_answers_the_groups_to_the_typescript_client(
    typescript_package: TypeScriptPackage, make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    credentials = tmp_path / "credentials.json"
    token = issue_token(credentials, "pia", [Role.REVIEWER], ["payments-leads", "emea"])
    stack = make_stack(security=ServerSecurity(credentials_file=credentials))

    done = typescript_package.run("--input-type=module", "-e", SCRIPT, f"127.0.0.1:{stack.orchestrator_port}", token)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"principal": "pia", "roles": ["REVIEWER"], "groups": ["emea", "payments-leads"]}
