"""deploy/prometheus.yml, deploy/alerts.yml and deploy/grafana-dashboard.json against the compose file
and the services' settings: every scrape target is a compose service at the metrics port it is
configured to serve on every interface, the prometheus service mounts what prometheus.yml names,
the rules are well formed, and every dashboard panel queries Prometheus. (That every metric these
files use is exposed by a running service: tests/metrics/test_processes.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from decisionflow_relay.config import METRICS as RELAY_METRICS
from effect_receiver.config import SERVER as RECEIVER_SERVER
from orchestrator.config import SERVER as ORCHESTRATOR_SERVER
from reconciler.config import METRICS as RECONCILER_METRICS
from tests.support.prometheus import alert_rules, firing, quiet, rule_test

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
PROMETHEUS = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
ALERTS = yaml.safe_load((ROOT / "deploy" / "alerts.yml").read_text())
DASHBOARD = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
METRICS_SETTINGS = {
    "decisionflow-receiver": RECEIVER_SERVER.metrics,
    "decisionflow-orchestrator": ORCHESTRATOR_SERVER.metrics,
    "decisionflow-reconciler": RECONCILER_METRICS,
    "decisionflow-relay": RELAY_METRICS,
}
OURS = sorted(name for name, service in COMPOSE["services"].items() if "build" in service)
# The audit monitor serves nothing: what it finds is its log and its exit status (docs/deployment.md).
SERVING = sorted(name for name in OURS if name != "audit-monitor")


def _targets() -> dict[str, str]:
    """Each scrape target (host:port) and the job that scrapes it."""
    return {
        target: job["job_name"]
        for job in PROMETHEUS["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }


@pytest.mark.parametrize("name", SERVING)
def test_each_service_serves_metrics_on_every_interface_and_is_scraped_there(name: str) -> None:
    service = COMPOSE["services"][name]
    settings = METRICS_SETTINGS[service["command"][0]]
    environment = service["environment"]
    assert environment[settings.address.env] == "0.0.0.0"
    port = int(environment[settings.port.env])
    assert f"{name}:{port}" in _targets(), f"prometheus.yml does not scrape {name}:{port}"
    assert "ports" not in service or all(str(port) not in str(p) for p in service["ports"]), "metrics published"


def test_every_target_is_a_compose_service_of_ours() -> None:
    hosts = {target.rpartition(":")[0] for target in _targets()}
    assert hosts == set(SERVING)
    assert COMPOSE["services"]["audit-monitor"]["command"][0] not in METRICS_SETTINGS
    assert set(_targets().values()) == {"receiver", "orchestrator", "reconciler", "relay"}


def test_the_prometheus_service_mounts_its_configuration_and_rules_read_only() -> None:
    prometheus = COMPOSE["services"]["prometheus"]
    mounts = {volume.split(":")[1]: volume.split(":") for volume in prometheus["volumes"] if volume.startswith("./")}
    config = mounts["/etc/prometheus/prometheus.yml"]
    assert config[0] == "./deploy/prometheus.yml" and config[2] == "ro"
    for rules in PROMETHEUS["rule_files"]:
        source, _, mode = mounts[rules]
        assert (ROOT / source).is_file() and mode == "ro"
        assert yaml.safe_load((ROOT / source).read_text()) == ALERTS
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]


def test_the_reconciler_healthcheck_asks_its_health_path() -> None:
    reconciler = COMPOSE["services"]["reconciler"]
    port = reconciler["environment"][RECONCILER_METRICS.port.env]
    assert reconciler["healthcheck"]["test"][-1] == f"http://127.0.0.1:{port}/healthz"


def test_alert_rules_are_well_formed() -> None:
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    assert {
        "DecisionflowUnknownTooOld",
        "DecisionflowReconcilerFailing",
        "DecisionflowReconcilerStale",
        "DecisionflowReconcilerAbsent",
        "DecisionflowServiceDown",
        "DecisionflowReconcilerEscalated",
        "DecisionflowReceiverErrors",
        "DecisionflowReceiverRefusesOrchestrator",
        "DecisionflowApproveSlow",
        "DecisionflowAuditLogLagging",
        "DecisionflowAuditCheckpointStale",
        "DecisionflowAuthorBudgetsRefusing",
    } <= set(names)
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["expr"].strip() and rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert rule["labels"]["severity"] in {"page", "ticket"}
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]
        assert rule["expr"].count("{") == rule["expr"].count("}"), rule["alert"]


def test_the_receiver_error_alert_counts_refused_credentials_and_leaves_refused_content_out() -> None:
    [rule] = [r for r in alert_rules() if r["alert"] == "DecisionflowReceiverErrors"]
    for content in ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND"):
        assert content not in rule["expr"]
    for code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "UNAUTHENTICATED", "PERMISSION_DENIED"):
        assert code in rule["expr"]


def test_a_receiver_refusing_the_orchestrators_credentials_pages() -> None:
    [rule] = [r for r in alert_rules() if r["alert"] == "DecisionflowReceiverRefusesOrchestrator"]
    assert "decisionflow_receiver_last_refusal_timestamp_seconds" in rule["expr"]
    assert "decisionflow_receiver_last_applied_timestamp_seconds" in rule["expr"]
    assert 'job="orchestrator"' in rule["expr"]
    assert rule["labels"]["severity"] == "page"


# One orchestrator process's gauges, a value a minute from time 0: its Apply refused for the
# credentials at 1 min, no approval for 40 min, then one accepted at 45 min, and refused again at 60 min.
# A second process never refused.
REFUSED_THEN_SILENT = """\
      - series: 'decisionflow_receiver_last_refusal_timestamp_seconds{job="orchestrator",instance="a:9101"}'
        values: '0 60x58 3600x10'
      - series: 'decisionflow_receiver_last_applied_timestamp_seconds{job="orchestrator",instance="a:9101"}'
        values: '0x44 2700x25'
      - series: 'decisionflow_receiver_last_refusal_timestamp_seconds{job="orchestrator",instance="b:9101"}'
        values: '0x70'
      - series: 'decisionflow_receiver_last_applied_timestamp_seconds{job="orchestrator",instance="b:9101"}'
        values: '0x20 1260x50'
"""


def test_the_refusal_alert_holds_until_an_apply_is_accepted_however_long_no_approval_comes(
    tmp_path: Path,
) -> None:
    alert = "DecisionflowReceiverRefusesOrchestrator"
    [rule] = [r for r in alert_rules() if r["alert"] == alert]
    first, again = "1970-01-01 00:01:00 +0000 UTC", "1970-01-01 01:00:00 +0000 UTC"

    def fires(minute: int, when: str) -> str:
        summary = (
            "The receiver refuses the credentials of the orchestrator at a:9101 "
            f"(last refused Apply {when}, none accepted since)"
        )
        return firing(alert, minute, 'severity: page, instance: "a:9101"', summary, rule["annotations"]["description"])

    cases = [
        quiet(alert, 0),
        fires(2, first),
        # 5, 10 and 40 minutes after the last refused Apply, with no Apply since: still firing.
        *(fires(minute, first) for minute in (6, 11, 41)),
        quiet(alert, 46),  # an Apply accepted at 45 min ends it
        fires(61, again),  # refused again: fires again
    ]
    done = rule_test(tmp_path / "refusal-alert-test.yml", REFUSED_THEN_SILENT, cases)

    assert done.returncode == 0, done.stdout + done.stderr


# Two orchestrator processes' audit gauges, a value a minute from time 0. At a:9101 the sequencer stops at
# 3 min (the oldest entry's age then grows by a minute each minute) and runs again at 12 min; b:9101 reads
# the same database a minute later. Checkpoints stop at 3 min too: the first leaf no checkpoint covers was
# recorded 10 minutes before, then signing resumes at 9 min. b:9101 has no signing key (no unsigned series).
AUDIT_STOPPED = """\
      - series: 'decisionflow_audit_oldest_unsequenced_age_seconds{job="orchestrator",instance="a:9101"}'
        values: '0 0 0 60 120 180 240 300 360 420 480 540 0 0'
      - series: 'decisionflow_audit_oldest_unsequenced_age_seconds{job="orchestrator",instance="b:9101"}'
        values: '0 0 0 0 60 120 180 240 300 360 420 480 540 0'
      - series: 'decisionflow_audit_unsigned_age_seconds{job="orchestrator",instance="a:9101"}'
        values: '0 0 0 0 600 840 960 1020 1080 0 0 0 0 0'
"""


def test_the_audit_alerts_fire_on_a_stopped_sequencer_and_on_leaves_left_unsigned(tmp_path: Path) -> None:
    rules = {r["alert"]: r for r in alert_rules() if r["alert"].startswith("DecisionflowAudit")}
    assert set(rules) == {
        "DecisionflowAuditLogLagging",
        "DecisionflowAuditCheckpointStale",
        "DecisionflowAuditSigningRefused",
    }

    def fires(alert: str, minute: int, value: str) -> str:
        summary = rules[alert]["annotations"]["summary"].replace("{{ $value | humanizeDuration }}", value)
        return firing(alert, minute, "severity: ticket", summary, rules[alert]["annotations"]["description"])

    lagging, stale = "DecisionflowAuditLogLagging", "DecisionflowAuditCheckpointStale"
    cases = [
        quiet(lagging, 2),
        quiet(lagging, 7),  # 300 s is the threshold, not past it
        quiet(lagging, 8),  # past it for less than a minute
        fires(lagging, 9, "7m 0s"),
        fires(lagging, 12, "9m 0s"),  # b:9101 still sees the backlog it reads a minute later
        quiet(lagging, 13),
        quiet(stale, 5),
        quiet(stale, 6),
        fires(stale, 7, "17m 0s"),
        fires(stale, 8, "18m 0s"),
        quiet(stale, 9),
    ]
    done = rule_test(tmp_path / "audit-alert-test.yml", AUDIT_STOPPED, cases)

    assert done.returncode == 0, done.stdout + done.stderr


# Two orchestrators: a's database is restored at minute 3 and put right at minute 8; b never sequences
# after the restore (the other replica holds the sequencer's turn), so it reports 0 throughout.
SIGNING_REFUSED = """\
      - series: 'decisionflow_audit_signing_refused{job="orchestrator",instance="a:9101"}'
        values: '0 0 0 1 1 1 1 1 0 0'
      - series: 'decisionflow_audit_signing_refused{job="orchestrator",instance="b:9101"}'
        values: '0 0 0 0 0 0 0 0 0 0'
"""


def test_a_sequencer_refusing_to_sign_pages_from_its_second_minute_until_the_log_extends_again(
    tmp_path: Path,
) -> None:
    alert = "DecisionflowAuditSigningRefused"
    [rule] = [r for r in alert_rules() if r["alert"] == alert]
    annotations = rule["annotations"]
    cases = [
        quiet(alert, 2),
        quiet(alert, 3),  # refusing for less than a minute
        *(
            firing(alert, minute, "severity: page", annotations["summary"], annotations["description"])
            for minute in (4, 7)
        ),
        quiet(alert, 8),  # the right copy restored: signing again
    ]
    done = rule_test(tmp_path / "signing-refused-alert-test.yml", SIGNING_REFUSED, cases)

    assert done.returncode == 0, done.stdout + done.stderr


# Two orchestrator processes: a caller refused for its call rate 3 times a minute on each from minute 1 to 40,
# and one content-budget refusal at minute 10 (a budget at work, which never fires).
REFUSALS = """\
      - series: 'decisionflow_quota_refusals_total{job="orchestrator",instance="a",reason="CALL_RATE_EXCEEDED"}'
        values: '0+3x40 120x20'
      - series: 'decisionflow_quota_refusals_total{job="orchestrator",instance="b",reason="CALL_RATE_EXCEEDED"}'
        values: '0+3x40 120x20'
      - series: 'decisionflow_quota_refusals_total{job="orchestrator",instance="a",reason="CONTENT_BUDGET_EXCEEDED"}'
        values: '0x10 1x50'
"""


def test_refusals_for_a_budget_alert_after_15_minutes_on_end_and_one_refusal_never(tmp_path: Path) -> None:
    alert = "DecisionflowAuthorBudgetsRefusing"
    [rule] = [r for r in alert_rules() if r["alert"] == alert]
    summary = rule["annotations"]["summary"].replace("{{ $labels.reason }}", "CALL_RATE_EXCEEDED")
    labels = "severity: ticket, reason: CALL_RATE_EXCEEDED"
    cases = [
        quiet(alert, 10),  # refused for 9 minutes: not yet; the single refusal: never
        quiet(alert, 15),
        *(firing(alert, minute, labels, summary, rule["annotations"]["description"]) for minute in (17, 40)),
        quiet(alert, 46),  # no refusal for over 5 minutes
    ]
    done = rule_test(tmp_path / "budget-alert-test.yml", REFUSALS, cases)

    assert done.returncode == 0, done.stdout + done.stderr


def _jobs_matched(expr: str) -> set[str]:
    """The jobs a `job="a"` or `job=~"a|b"` matcher in expr selects (every job for a bare regex)."""
    jobs: set[str] = set()
    for operator, value in re.findall(r'\bjob\s*(=~|=)\s*"([^"]*)"', expr):
        jobs |= set(value.split("|")) if operator == "=~" else {value}
    return jobs


def test_every_scraped_job_has_a_rule_that_fires_when_its_target_is_down() -> None:
    down = [rule for rule in alert_rules() if re.match(r"\s*up\b", rule["expr"]) and "== 0" in rule["expr"]]
    assert down, "no rule reads up == 0"
    covered = set().union(*(_jobs_matched(rule["expr"]) for rule in down))
    assert set(_targets().values()) <= covered
    assert all(rule["labels"]["severity"] == "page" and rule.get("for") for rule in down)


def test_every_job_an_alert_names_is_scraped() -> None:
    for rule in alert_rules():
        assert _jobs_matched(rule["expr"]) <= set(_targets().values()), rule["alert"]


def test_a_reconciler_that_is_gone_fires_an_absence_alert_and_the_stale_alert_does_not_claim_to() -> None:
    [absent] = [r for r in alert_rules() if r["expr"].strip().startswith("absent(decisionflow_reconciler_")]
    assert absent["expr"].strip() == "absent(decisionflow_reconciler_last_success_timestamp_seconds)"
    assert absent["labels"]["severity"] == "page"
    [stale] = [r for r in alert_rules() if r["alert"] == "DecisionflowReconcilerStale"]
    assert "not running" not in stale["annotations"]["description"]


def test_every_dashboard_panel_queries_prometheus() -> None:
    panels = DASHBOARD["panels"]
    assert panels
    assert {variable["name"] for variable in DASHBOARD["templating"]["list"]} == {"datasource"}
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        assert panel["datasource"]["type"] == "prometheus"
        assert panel["targets"] and all(target["expr"].strip() for target in panel["targets"]), panel["title"]
