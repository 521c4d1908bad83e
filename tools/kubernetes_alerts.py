"""Writes (or checks) the Kubernetes copy of the alert rules from deploy/alerts.yml, the one source.

python tools/kubernetes_alerts.py --write   # regenerate deploy/kubernetes/base/monitoring/alerts.yml
python tools/kubernetes_alerts.py --check   # exit 1 when it is stale

kustomize reads only files under a kustomization's folder, so the rules it puts in a ConfigMap are a
generated copy. The copy leaves out the rules that read series only the reconciler's loop exports
(``decisionflow_reconciler_*``): on Kubernetes the reconciler is a CronJob running ``--once``, which
serves no metrics, so those rules would fire (absent) or never evaluate. In their place it adds the
rules of deploy/kubernetes/reconciler-alerts.yml, which read what kube-state-metrics reports of the
CronJob and its Jobs (a failed pass, no successful pass, no pass started, no CronJob). The
orchestrators' own ``decisionflow_oldest_unknown_age_seconds`` still pages when nothing settles the Unknown.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "deploy" / "alerts.yml"
TARGET = ROOT / "deploy" / "kubernetes" / "base" / "monitoring" / "alerts.yml"
CRONJOB_RULES = ROOT / "deploy" / "kubernetes" / "reconciler-alerts.yml"
LOOP_ONLY_SERIES = "decisionflow_reconciler_"
HEADER = (
    "# Generated from deploy/alerts.yml and deploy/kubernetes/reconciler-alerts.yml by\n"
    "# tools/kubernetes_alerts.py --write; do not edit.\n"
    "# Left out: the rules on decisionflow_reconciler_* series, which only the reconciler's loop serves\n"
    "# (on Kubernetes it is a CronJob running --once); added in their place: the CronJob's rules, on\n"
    "# kube-state-metrics series. See docs/kubernetes.md#prometheus.\n"
)


def left_out(rule: dict[str, Any]) -> bool:
    """Whether a rule reads a series only the reconciler's loop exports."""
    return LOOP_ONLY_SERIES in str(rule["expr"])


def render(source: str, cronjob_rules: str) -> str:
    """Return the Kubernetes copy of the rules in source, with the groups of cronjob_rules added."""
    rules = yaml.safe_load(source)
    for group in rules["groups"]:
        group["rules"] = [rule for rule in group["rules"] if not left_out(rule)]
    rules["groups"] += yaml.safe_load(cronjob_rules)["groups"]
    return HEADER + yaml.safe_dump(rules, sort_keys=False, width=110, allow_unicode=True)


def main() -> int:
    """Write or check the Kubernetes copy of the alert rules."""
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = cli.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = cli.parse_args()
    wanted = render(SOURCE.read_text(encoding="utf-8"), CRONJOB_RULES.read_text(encoding="utf-8"))
    if args.write:
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        TARGET.write_text(wanted, encoding="utf-8")
        return 0
    if not TARGET.is_file() or TARGET.read_text(encoding="utf-8") != wanted:
        sys.stderr.write(f"{TARGET.relative_to(ROOT)} is stale: run python tools/kubernetes_alerts.py --write\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
