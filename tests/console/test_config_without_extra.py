"""The console's configuration is read without the console extra: the configuration reference and the
tests' plugins import it under every Python, where only the dev extra is installed (make pythons)."""

from __future__ import annotations

import subprocess
import sys

# The console extra's packages (pyproject.toml, [project.optional-dependencies] console), made
# unimportable in the child as they are where the extra is not installed (regex stays: the server
# distribution's workflow framework brings it too).
CONSOLE_EXTRA = (
    "starlette",
    "jinja2",
    "authlib",
    "httpx2",
    "itsdangerous",
    "multipart",
    "uvicorn",
    "confusable_homoglyphs",
)


def test_the_console_configuration_imports_without_the_console_extra() -> None:
    probe = (
        "import sys\n"
        f"for name in {CONSOLE_EXTRA!r}:\n"
        "    sys.modules[name] = None\n"
        "from decisionflow_console.config import SETTINGS, ConsoleConfig\n"
        "import tools.config_reference\n"
        "print(len(SETTINGS), ConsoleConfig.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == "ConsoleConfig"
