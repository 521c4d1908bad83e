"""README.md stays true of the code: the two commands, the generated configuration reference,
every file the guarantees table links to, and every command and flag it and the runbook
(docs/operations.md) show."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import SCRIPTS, command_words, help_text, names_flag

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RUNBOOK = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")


def test_configuration_reference_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "config_reference.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_two_commands() -> None:
    block = README.split("## Two commands", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: setup$", makefile, re.MULTILINE)
    test = re.search(r"^test: setup\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert test is not None
    # make test runs every check make check runs, the proto check and the whole suite.
    for target in ("lint", "typecheck", "proto-check", "unit"):
        assert re.search(rf"\$\(MAKE\)[^\n]* {target}\b", test[1]), target
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_every_linked_file_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links
    for link in links:
        if link.startswith("http"):
            continue
        assert (ROOT / link.replace("\\_", "_")).exists(), link


def _shell_commands(markdown: str) -> list[list[str]]:
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", markdown, re.DOTALL):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            argv = line.split("#")[0].split()
            if argv and argv[0] in SCRIPTS:
                commands.append(argv)
    return commands


@pytest.mark.slow
@pytest.mark.parametrize(("markdown", "at_least"), [(README, 4), (RUNBOOK, 20)], ids=["README", "runbook"])
def test_every_documented_command_and_flag_exists(markdown: str, at_least: int) -> None:
    commands = _shell_commands(markdown)
    assert len(commands) >= at_least
    for argv in commands:
        usage = help_text(command_words(argv))
        for flag in (arg.split("=")[0] for arg in argv if arg.startswith("--")):
            assert names_flag(usage, flag), (argv, flag)
