"""Reading the real command lines: the help text of a console script, and whether it names a flag."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def help_text(words: list[str]) -> str:
    """Return the --help output of a console script and its subcommand words (run as a module)."""
    module = SCRIPTS[words[0]].split(":")[0]
    if module == "decisionflow_cli":
        module = "decisionflow_cli"
    done = subprocess.run(
        [sys.executable, "-m", module, *words[1:], "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, (words, done.stderr)
    return done.stdout


def command_words(argv: list[str]) -> list[str]:
    """Return the program and the subcommand words before the first option or argument value."""
    words = [argv[0]]
    for arg in argv[1:]:
        if arg.startswith("-") or not re.fullmatch(r"[a-z][a-z-]*", arg):
            break
        words.append(arg)
    return words


def names_flag(usage: str, flag: str) -> bool:
    """Return True when the help text documents flag."""
    return re.search(rf"(^|\s|\[){re.escape(flag)}(\s|,|$|=|\])", usage, re.MULTILINE) is not None
