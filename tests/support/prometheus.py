"""Debian's promtool (package prometheus), which checks alert rules and runs their unit tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def promtool() -> str:
    """The path of promtool; the test skips without it, unless CI=true or DECISIONFLOW_REQUIRE_PROMTOOL=1."""
    found = shutil.which("promtool")
    if found is not None:
        return found
    reason = "promtool not installed (apt-get install prometheus)"
    if os.environ.get("DECISIONFLOW_REQUIRE_PROMTOOL") == "1" or os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; required here (CI=true or DECISIONFLOW_REQUIRE_PROMTOOL=1)")
    pytest.skip(reason)


def run_rule_tests(tests: Path) -> subprocess.CompletedProcess[str]:
    """Run ``promtool test rules`` on a unit test file."""
    return subprocess.run(
        [promtool(), "test", "rules", str(tests)], capture_output=True, text=True, timeout=60, check=False
    )
