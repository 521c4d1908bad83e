"""Debian's promtool (package prometheus), which checks alert rules and runs their unit tests; and the unit
tests of deploy/alerts.yml: its rules, a test of input series and cases, and the cases' two shapes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "alerts.yml"


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


def alert_rules() -> list[dict[str, Any]]:
    """Every alerting rule of deploy/alerts.yml, across its groups."""
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def rule_test(path: Path, series: str, cases: list[str]) -> subprocess.CompletedProcess[str]:
    """Write to path a promtool test of deploy/alerts.yml (input series a minute apart, and the alert cases)
    and run it."""
    path.write_text(
        f"rule_files: [{json.dumps(str(ALERTS))}]\n"
        "evaluation_interval: 1m\n"
        "tests:\n"
        "  - interval: 1m\n"
        "    input_series:\n"
        f"{series}"
        "    alert_rule_test:\n"
        f"{''.join(cases)}"
    )
    return run_rule_tests(path)


def quiet(alert: str, minute: int) -> str:
    """A case: alert not firing at minute."""
    return f"      - eval_time: {minute}m\n        alertname: {alert}\n        exp_alerts: []\n"


def firing(alert: str, minute: int, labels: str, summary: str, description: str) -> str:
    """A case: alert firing at minute with labels (``severity: ticket``) and these annotations."""
    return (
        f"      - eval_time: {minute}m\n"
        f"        alertname: {alert}\n"
        "        exp_alerts:\n"
        f"          - exp_labels: {{{labels}}}\n"
        "            exp_annotations:\n"
        f"              summary: {json.dumps(summary)}\n"
        f"              description: {json.dumps(description)}\n"
    )
