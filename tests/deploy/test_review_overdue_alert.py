"""The alert on reviews overdue beyond 4 hours (deploy/alerts.yml), run by promtool: it reads the replica
that ran the review timer last (the max across replicas), fires after 10 minutes beyond the threshold,
and clears once the review is decided."""

from __future__ import annotations

from pathlib import Path

from tests.support.prometheus import alert_rules, firing, quiet, rule_test

ALERT = "DecisionflowReviewsOverdue"
# Replica a runs the timer: one review overdue from 14,000 s, 60 s more each minute, decided at minute 30;
# replica b never runs it (its gauge stays 0).
OVERDUE = """\
      - series: 'decisionflow_review_oldest_overdue_seconds{job="orchestrator",instance="a"}'
        values: '14000+60x29 0x20'
      - series: 'decisionflow_review_oldest_overdue_seconds{job="orchestrator",instance="b"}'
        values: '0x50'
"""


def test_reviews_overdue_beyond_4_hours_alert_after_10_minutes_and_clear_once_decided(tmp_path: Path) -> None:
    [rule] = [r for r in alert_rules() if r["alert"] == ALERT]
    annotations = rule["annotations"]

    def fires(minute: int) -> str:
        return firing(ALERT, minute, "severity: ticket", annotations["summary"], annotations["description"])

    cases = [
        quiet(ALERT, 5),  # 14,300 s: under the threshold
        quiet(ALERT, 15),  # beyond it since minute 7: not for 10 minutes yet
        fires(18),
        fires(29),
        quiet(ALERT, 31),  # decided
    ]
    done = rule_test(tmp_path / "overdue-alert-test.yml", OVERDUE, cases)

    assert done.returncode == 0, done.stdout + done.stderr
