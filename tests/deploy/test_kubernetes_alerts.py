"""The Kubernetes copy of the alert rules (deploy/kubernetes/base/monitoring/alerts.yml) is generated
from deploy/alerts.yml, the one source, by tools/kubernetes_alerts.py; it is current and leaves out
only the rules on the reconciler loop's own series."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tools import kubernetes_alerts

ROOT = Path(__file__).resolve().parents[2]


def _rules(text: str) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in yaml.safe_load(text)["groups"] for rule in group["rules"]}


def test_the_kubernetes_rules_are_current() -> None:
    checked = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "kubernetes_alerts.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


def test_the_copy_is_the_source_without_the_reconciler_loop_rules() -> None:
    source = _rules(kubernetes_alerts.SOURCE.read_text())
    copy = _rules(kubernetes_alerts.TARGET.read_text())
    left_out = {name for name, rule in source.items() if "decisionflow_reconciler_" in rule["expr"]}
    assert left_out == {
        "DecisionflowReconcilerFailing",
        "DecisionflowReconcilerEscalated",
        "DecisionflowReconcilerAbsent",
        "DecisionflowReconcilerStale",
    }
    assert copy == {name: rule for name, rule in source.items() if name not in left_out}
    assert "DecisionflowUnknownTooOld" in copy, "the page that fires when nothing settles the Unknown"


def test_a_changed_source_makes_the_copy_stale() -> None:
    source = kubernetes_alerts.SOURCE.read_text().replace("> 300", "> 301", 1)
    assert kubernetes_alerts.render(source) != kubernetes_alerts.TARGET.read_text()
