"""The alert on reviews overdue beyond 4 hours (deploy/alerts.yml), run by promtool: it reads the replica
that ran the review timer last (the max across replicas), fires after 10 minutes beyond the threshold,
and clears once the review is decided."""

from __future__ import annotations

import json
from pathlib import Path

from tests.deploy.test_monitoring import _rule_test, _rules

# Replica a runs the timer: one review overdue from 14,000 s, 60 s more each minute, decided at minute 30;
# replica b never runs it (its gauge stays 0).
OVERDUE = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'decisionflow_review_oldest_overdue_seconds{{job="orchestrator",instance="a"}}'
        values: '14000+60x29 0x20'
      - series: 'decisionflow_review_oldest_overdue_seconds{{job="orchestrator",instance="b"}}'
        values: '0x50'
    alert_rule_test:
{cases}
"""
FIRING = """      - eval_time: {minute}m
        alertname: DecisionflowReviewsOverdue
        exp_alerts:
          - exp_labels: {{severity: ticket}}
            exp_annotations:
              summary: {summary}
              description: {description}
"""
QUIET = """      - eval_time: {minute}m
        alertname: DecisionflowReviewsOverdue
        exp_alerts: []
"""


def test_reviews_overdue_beyond_4_hours_alert_after_10_minutes_and_clear_once_decided(tmp_path: Path) -> None:
    [rule] = [r for r in _rules() if r["alert"] == "DecisionflowReviewsOverdue"]
    firing = {
        "summary": json.dumps(rule["annotations"]["summary"]),
        "description": json.dumps(rule["annotations"]["description"]),
    }
    cases = [
        QUIET.format(minute=5),  # 14,300 s: under the threshold
        QUIET.format(minute=15),  # beyond it since minute 7: not for 10 minutes yet
        FIRING.format(minute=18, **firing),
        FIRING.format(minute=29, **firing),
        QUIET.format(minute=31),  # decided
    ]
    done = _rule_test(tmp_path / "overdue-alert-test.yml", OVERDUE, cases)

    assert done.returncode == 0, done.stdout + done.stderr
