"""The Kubernetes copy of the alert rules (deploy/kubernetes/base/monitoring/alerts.yml) is generated
from deploy/alerts.yml, the one source, by tools/kubernetes_alerts.py; it is current, leaves out only
the rules on the reconciler loop's own series, and adds in their place the reconciler CronJob's rules
(deploy/kubernetes/reconciler-alerts.yml), which promtool's unit tests drive here with the series
kube-state-metrics reports: a failed pass, passes that stop succeeding, passes no longer started, no
CronJob at all; and the audit monitor CronJob's failed checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.prometheus import run_rule_tests
from tools import kubernetes_alerts

ROOT = Path(__file__).resolve().parents[2]
CRONJOB_ALERTS = {
    "DecisionflowReconcilerJobFailed",
    "DecisionflowReconcilerCronJobStale",
    "DecisionflowReconcilerCronJobNotScheduled",
    "DecisionflowReconcilerCronJobAbsent",
    "DecisionflowAuditMonitorJobFailed",
}


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


def test_the_copy_is_the_source_without_the_reconciler_loop_rules_and_with_the_cronjob_rules() -> None:
    source = _rules(kubernetes_alerts.SOURCE.read_text())
    copy = _rules(kubernetes_alerts.TARGET.read_text())
    left_out = {name for name, rule in source.items() if "decisionflow_reconciler_" in rule["expr"]}
    assert left_out == {
        "DecisionflowReconcilerFailing",
        "DecisionflowReconcilerEscalated",
        "DecisionflowReconcilerAbsent",
        "DecisionflowReconcilerStale",
    }
    added = _rules(kubernetes_alerts.CRONJOB_RULES.read_text())
    assert set(added) == CRONJOB_ALERTS
    assert copy == {name: rule for name, rule in source.items() if name not in left_out} | added
    assert "DecisionflowUnknownTooOld" in copy, "the page that fires when nothing settles the Unknown"


def test_a_changed_source_makes_the_copy_stale() -> None:
    source = kubernetes_alerts.SOURCE.read_text().replace("> 300", "> 301", 1)
    added = kubernetes_alerts.CRONJOB_RULES.read_text()
    current = kubernetes_alerts.TARGET.read_text()
    assert kubernetes_alerts.render(source, added) != current
    changed = added.replace("< 900", "< 901", 1)
    assert kubernetes_alerts.render(kubernetes_alerts.SOURCE.read_text(), changed) != current


# --- The CronJob's rules, driven by kube-state-metrics' series (promtool test rules) -----------------

KSM = 'job="kube-state-metrics", instance="10.0.0.9:8080"'
HERE = 'namespace="decisionflow"'


def _series(name: str, labels: str, values: str) -> dict[str, str]:
    return {"series": f"{name}{{{KSM}, {labels}}}", "values": values}


def _alert(rule: str, minute: int, labels: dict[str, str] | None = None, value: str = "") -> dict[str, Any]:
    """An expected evaluation: rule firing at minute with labels (its annotations rendered with value),
    or not firing when labels is None."""
    case: dict[str, Any] = {"eval_time": f"{minute}m", "alertname": rule, "exp_alerts": []}
    if labels is None:
        return case
    spec = _rules(kubernetes_alerts.TARGET.read_text())[rule]
    annotations = {
        key: text.replace("{{ $value | humanizeDuration }}", value).replace("{{ $value }}", value)
        for key, text in spec["annotations"].items()
    }
    case["exp_alerts"] = [{"exp_labels": spec["labels"] | labels, "exp_annotations": annotations}]
    return case


def _run(tmp_path: Path, tests: list[dict[str, Any]]) -> None:
    file = tmp_path / "cronjob-alert-tests.yml"
    file.write_text(
        yaml.safe_dump(
            {"rule_files": [str(kubernetes_alerts.TARGET)], "evaluation_interval": "1m", "tests": tests},
            sort_keys=False,
        )
    )
    done = run_rule_tests(file)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_failed_pass_raises_a_ticket_for_15_minutes_and_other_failed_jobs_do_not(tmp_path: Path) -> None:
    # The reconciler's Job created at 2 min fails at 3 min; a second, created at 10 min, fails at 11 min.
    # Also failed: an old reconciler Job still kept in the history, a Job of another CronJob, and a
    # reconciler Job of another namespace.
    first, second = 'job_name="reconciler-28000002"', 'job_name="reconciler-28000010"'
    owned = 'owner_kind="CronJob", owner_name="reconciler", owner_is_controller="true"'
    series = [
        _series("kube_job_owner", f"{HERE}, {first}, {owned}", "1x40"),
        _series("kube_job_created", f"{HERE}, {first}", "120x40"),
        _series("kube_job_failed", f'{HERE}, {first}, condition="true", reason="BackoffLimitExceeded"', "_ _ _ 1x37"),
        _series("kube_job_failed", f'{HERE}, {first}, condition="false", reason="BackoffLimitExceeded"', "_ _ _ 0x37"),
        _series("kube_job_owner", f"{HERE}, {second}, {owned}", "_ _ _ _ _ _ _ _ _ _ 1x30"),
        _series("kube_job_created", f"{HERE}, {second}", "_ _ _ _ _ _ _ _ _ _ 600x30"),
        _series("kube_job_failed", f'{HERE}, {second}, condition="true"', "_ _ _ _ _ _ _ _ _ _ _ 1x29"),
        _series("kube_job_owner", f'{HERE}, job_name="reconciler-27990000", {owned}', "1x40"),
        _series("kube_job_created", f'{HERE}, job_name="reconciler-27990000"', "-3600x40"),
        _series("kube_job_failed", f'{HERE}, job_name="reconciler-27990000", condition="true"', "1x40"),
        _series("kube_job_owner", f'{HERE}, job_name="export-1", owner_kind="CronJob", owner_name="export"', "1x40"),
        _series("kube_job_created", f'{HERE}, job_name="export-1"', "60x40"),
        _series("kube_job_failed", f'{HERE}, job_name="export-1", condition="true"', "1x40"),
        _series("kube_job_owner", f'namespace="staging", job_name="reconciler-28000002", {owned}', "1x40"),
        _series("kube_job_created", 'namespace="staging", job_name="reconciler-28000002"', "120x40"),
        _series("kube_job_failed", 'namespace="staging", job_name="reconciler-28000002", condition="true"', "1x40"),
    ]
    rule, labels = "DecisionflowReconcilerJobFailed", {"namespace": "decisionflow"}
    cases = [
        _alert(rule, 2),
        _alert(rule, 4, labels, "1"),  # at once: one failed pass
        _alert(rule, 12, labels, "2"),
        _alert(rule, 16, labels, "2"),
        _alert(rule, 17, labels, "1"),  # the first one was created 15 minutes ago
        _alert(rule, 25),
    ]
    _run(tmp_path, [{"interval": "1m", "input_series": series, "alert_rule_test": cases}])


def test_passes_that_stop_succeeding_page_after_five_minutes_and_so_does_a_cronjob_that_never_succeeded(
    tmp_path: Path,
) -> None:
    cronjob = f'{HERE}, cronjob="reconciler"'
    rule, labels = "DecisionflowReconcilerCronJobStale", {"namespace": "decisionflow", "cronjob": "reconciler"}
    # A pass succeeds every minute until 5 min, then none does; another CronJob's passes never succeed.
    stopped = [
        _series("kube_cronjob_created", cronjob, "0x25"),
        _series("kube_cronjob_status_last_successful_time", cronjob, "0+60x5 300x20"),
        _series("kube_cronjob_created", f'{HERE}, cronjob="export"', "0x25"),
        _series("kube_cronjob_status_last_successful_time", f'{HERE}, cronjob="export"', "0x25"),
    ]
    stopped_cases = [_alert(rule, 5), _alert(rule, 10), _alert(rule, 11), _alert(rule, 12, labels, "7m 0s")]
    # Created at 0, and no pass has ever succeeded (no last_successful_time series).
    never = [_series("kube_cronjob_created", cronjob, "0x10")]
    never_cases = [_alert(rule, 5), _alert(rule, 6), _alert(rule, 7, labels, "7m 0s")]
    _run(
        tmp_path,
        [
            {"interval": "1m", "input_series": stopped, "alert_rule_test": stopped_cases},
            {"interval": "1m", "input_series": never, "alert_rule_test": never_cases},
        ],
    )


def test_passes_no_longer_started_page_and_a_missing_cronjob_pages(tmp_path: Path) -> None:
    cronjob = f'{HERE}, cronjob="reconciler"'
    # Passes start every minute (the next is always a minute ahead) until the CronJob is suspended
    # after the pass of 3 min: the next one stays due at 4 min.
    suspended = [
        _series("kube_cronjob_info", f'{cronjob}, schedule="* * * * *", concurrency_policy="Forbid"', "1x20"),
        _series("kube_cronjob_next_schedule_time", cronjob, "60+60x3 240x20"),
        _series("kube_cronjob_spec_suspend", cronjob, "0 0 0 0 1x20"),
    ]
    rule, labels = "DecisionflowReconcilerCronJobNotScheduled", {"namespace": "decisionflow", "cronjob": "reconciler"}
    suspended_cases = [
        _alert(rule, 3),
        _alert(rule, 9),
        _alert(rule, 10),
        _alert(rule, 11, labels, "7m 0s"),
        _alert("DecisionflowReconcilerCronJobAbsent", 11),
    ]
    # The CronJob is deleted after 4 min (its series end); another namespace's reconciler stays.
    deleted = [
        _series("kube_cronjob_info", f'{cronjob}, schedule="* * * * *", concurrency_policy="Forbid"', "1x4"),
        _series("kube_cronjob_info", 'namespace="staging", cronjob="reconciler", schedule="* * * * *"', "1x30"),
    ]
    absent = "DecisionflowReconcilerCronJobAbsent"
    deleted_cases = [_alert(absent, 4), _alert(absent, 8), _alert(absent, 20, labels)]
    _run(
        tmp_path,
        [
            {"interval": "1m", "input_series": suspended, "alert_rule_test": suspended_cases},
            {"interval": "1m", "input_series": deleted, "alert_rule_test": deleted_cases},
        ],
    )


def test_a_failed_audit_monitor_check_pages_while_checks_keep_failing(tmp_path: Path) -> None:
    # The monitor's Job created at 2 min fails at 3 min (a fork); after it every check fails too (the one
    # created at 10 min). A failed reconciler Job is not the monitor's.
    owned = 'owner_kind="CronJob", owner_name="audit-monitor", owner_is_controller="true"'
    first, second = 'job_name="audit-monitor-28000002"', 'job_name="audit-monitor-28000010"'
    series = [
        _series("kube_job_owner", f"{HERE}, {first}, {owned}", "1x40"),
        _series("kube_job_created", f"{HERE}, {first}", "120x40"),
        _series("kube_job_failed", f'{HERE}, {first}, condition="true"', "_ _ _ 1x37"),
        _series("kube_job_owner", f"{HERE}, {second}, {owned}", "_ _ _ _ _ _ _ _ _ _ 1x30"),
        _series("kube_job_created", f"{HERE}, {second}", "_ _ _ _ _ _ _ _ _ _ 600x30"),
        _series("kube_job_failed", f'{HERE}, {second}, condition="true"', "_ _ _ _ _ _ _ _ _ _ _ 1x29"),
        _series(
            "kube_job_owner",
            f'{HERE}, job_name="reconciler-28000002", owner_kind="CronJob", owner_name="reconciler"',
            "1x40",
        ),
        _series("kube_job_created", f'{HERE}, job_name="reconciler-28000002"', "120x40"),
        _series("kube_job_failed", f'{HERE}, job_name="reconciler-28000002", condition="true"', "1x40"),
    ]
    rule, labels = "DecisionflowAuditMonitorJobFailed", {"namespace": "decisionflow"}
    cases = [
        _alert(rule, 2),
        _alert(rule, 4, labels, "1"),
        _alert(rule, 12, labels, "2"),
        _alert(rule, 17, labels, "1"),
        _alert(rule, 25),
    ]
    _run(tmp_path, [{"interval": "1m", "input_series": series, "alert_rule_test": cases}])
