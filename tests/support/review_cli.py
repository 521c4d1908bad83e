"""Review-command fixtures: an in-process receiver and orchestrator with authentication on, and token files."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from decisionflow_cli import main
from decisionflow_server.runtime.auth import Role, issue_token
from decisionflow_server.runtime.server_security import ServerSecurity
from tests.support.stack import T1042_BODY, Stack, make_stack, open_stack

__all__ = ["make_stack"]  # re-exported so pytest finds the fixture in this directory

PRINCIPALS = {
    "ava": (Role.AUTHOR,),
    "rita": (Role.REVIEWER,),
    "ops": (Role.OPERATOR, Role.EFFECT_READER),
    "audrey": (Role.AUDITOR,),
}


@dataclass
class Run:
    """One ``decisionflow`` command: its exit status, stdout parsed as JSON, and its stderr."""

    exit_code: int
    document: dict[str, object]
    stderr: str

    @property
    def error(self) -> dict[str, object]:
        """The error object of a failed command."""
        error = self.document["error"]
        assert isinstance(error, dict)
        return error


@dataclass
class Cli:
    """Runs ``decisionflow`` commands in process against a stack, as a named principal."""

    stack: Stack
    tokens: dict[str, Path]
    capsys: pytest.CaptureFixture[str]

    @property
    def target(self) -> str:
        """The orchestrator's address."""
        return f"127.0.0.1:{self.stack.orchestrator_port}"

    def raw(self, *args: str, principal: str | None = None) -> tuple[int, str, str]:
        """Run one command and return its exit status, stdout and stderr as they are; as principal against
        the stack when one is given, else with neither target nor token (an offline command)."""
        argv = list(args)
        if principal is not None:
            argv += ["--target", self.target, "--token-file", str(self.tokens[principal])]
        self.capsys.readouterr()
        exit_code = main(argv)
        out, err = self.capsys.readouterr()
        return exit_code, out, err

    def __call__(self, *args: str, principal: str | None = "rita", target: str | None = None) -> Run:
        """Run one command; principal None sends no token."""
        argv = [*args, "--target", target or self.target]
        if principal is not None:
            argv += ["--token-file", str(self.tokens[principal])]
        self.capsys.readouterr()
        exit_code = main(argv)
        out, err = self.capsys.readouterr()
        lines = out.strip().splitlines()
        assert len(lines) <= 1, f"one JSON object expected on stdout, got {out!r}"
        return Run(exit_code, json.loads(lines[0]) if lines else {}, err)


def write_tokens(directory: Path) -> dict[str, Path]:
    """A credentials file in directory with PRINCIPALS, and their token files."""
    credentials = directory / "credentials.json"
    files: dict[str, Path] = {}
    for principal, roles in PRINCIPALS.items():
        files[principal] = directory / f"{principal}.token"
        files[principal].write_text(issue_token(credentials, principal, roles) + "\n")
    return files


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, Path]:
    """A credentials file with ava (author), rita (reviewer), ops (operator) and audrey (auditor), and
    their token files."""
    return write_tokens(tmp_path)


@pytest.fixture
def make_cli(
    make_stack: Callable[..., Stack], tokens: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., Cli]]:
    """make_cli(receiver_failpoints=..., **orchestrator settings): a stack with authentication on."""

    def make(**settings: object) -> Cli:
        security = ServerSecurity(credentials_file=tmp_path / "credentials.json")
        stack = make_stack(security=security, **settings)
        return Cli(stack, tokens, capsys)

    yield make


@contextmanager
def cli_in(directory: Path, capsys: pytest.CaptureFixture[str], **settings: Any) -> Iterator[Cli]:
    """What make_cli makes, outside any test's stacks: a stack with authentication on (its databases by default
    in directory, settings as make_cli takes them) and fresh tokens in directory, stopped on leaving."""
    tokens = write_tokens(directory)
    stack = open_stack(directory, security=ServerSecurity(credentials_file=directory / "credentials.json"), **settings)
    try:
        yield Cli(stack, tokens, capsys)
    finally:
        stack.close()


def proposal_file(
    directory: Path, case_id: str = "T-1042", hold_version: int = 2, body: str = T1042_BODY, name: str = ""
) -> Path:
    """Write a proposal JSON file for case_id with HOLD-7 at hold_version and return its path."""
    path = directory / (name or f"{case_id}-v{hold_version}.json")
    path.write_text(
        json.dumps(
            {
                "case_id": case_id,
                "action": "record_support_review",
                "body": body,
                "evidence": evidence(hold_version),
                "policy": {"name": "support-replies", "version_label": "2026-10", "allowance_units": 9, "rules": {}},
            }
        )
    )
    return path


def evidence(hold_version: int) -> list[dict[str, object]]:
    """The seed case's two sources with HOLD-7 at hold_version (the quotation never changes)."""
    return [
        {"source_id": "HOLD-7", "version": hold_version, "quotation": "Firmware 4.2.0 may hold."},
        {"source_id": "KB-12", "version": 1, "quotation": "Update to 4.2.1."},
    ]
