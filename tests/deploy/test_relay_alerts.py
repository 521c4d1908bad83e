"""The relay's alerts (deploy/alerts.yml), run by promtool on the relay's own series: stalled (events wait
and the cursor does not move, or the oldest unacknowledged event is old), the broker down, and no relay at
all. Each fires after its `for`, names the relay's instance where it has one, and clears when the relay
catches up, NATS acknowledges again, or a relay reports again."""

from __future__ import annotations

from pathlib import Path

from tests.support.prometheus import alert_rules, firing, quiet, rule_test

STALLED = "DecisionflowRelayStalled"
BROKER_DOWN = "DecisionflowRelayBrokerDown"
ABSENT = "DecisionflowRelayAbsent"


def _fires(alert: str, minute: int, instance: str | None = None) -> str:
    """The case of alert firing at minute, its annotations expanded for instance (no instance label: None)."""
    [rule] = [r for r in alert_rules() if r["alert"] == alert]
    labels = "severity: page" + (f", instance: {instance}" if instance else "")
    summary, description = (rule["annotations"][key] for key in ("summary", "description"))
    if instance:
        summary = summary.replace("{{ $labels.instance }}", instance)
        description = description.replace("{{ $labels.instance }}", instance)
    assert "{{" not in summary + description, (summary, description)
    return firing(alert, minute, labels, summary, description)


def _series(name: str, instance: str, values: str) -> str:
    """One input series of the relay's, for promtool."""
    series = f'decisionflow_relay_{name}{{job="relay",instance="{instance}"}}'
    return f"      - series: '{series}'\n        values: '{values}'\n"


def _relay(instance: str, cursor: str, lag_events: str, lag_seconds: str) -> str:
    return "".join(
        _series(name, instance, values)
        for name, values in (("cursor_index", cursor), ("lag_events", lag_events), ("lag_seconds", lag_seconds))
    )


# Relay a publishes one event a minute for 10 minutes, then its cursor stops at 10 while 5 events wait
# (minutes 10 to 39); at minute 40 it catches up. Relay b is idle all along: nothing waits, the cursor
# never moves.
STUCK = _relay("a", "0+1x10 10x29 15x20", "0x9 5x30 0x20", "0x9 60+60x29 0x20") + _relay("b", "7x60", "0x60", "0x60")


def test_a_relay_whose_cursor_stops_while_events_wait_fires_after_ten_minutes_and_clears_once_caught_up(
    tmp_path: Path,
) -> None:
    cases = [
        quiet(STALLED, 9),  # publishing
        quiet(STALLED, 17),  # stuck since minute 10: the range sees no change from minute 15, not for 5 min yet
        _fires(STALLED, 22, "a"),
        _fires(STALLED, 39, "a"),
        quiet(STALLED, 42),  # caught up; the idle relay b never fires
        quiet(STALLED, 59),
    ]
    done = rule_test(tmp_path / "relay-stalled-test.yml", STUCK, cases)
    assert done.returncode == 0, done.stdout + done.stderr


# Relay c moves its cursor every minute but its oldest unacknowledged event ages past 15 minutes (a backlog it
# does not work down: publishes slower than events come), from minute 10 to 29; then it is 1 minute old.
SLOW = _relay("c", "0+1x40", "500x40", "360+60x29 60x10")


def test_a_relay_whose_oldest_waiting_event_is_over_15_minutes_old_fires_though_its_cursor_moves(
    tmp_path: Path,
) -> None:
    cases = [
        quiet(STALLED, 9),  # 900 s old at minute 9: not over it
        quiet(STALLED, 14),  # over it from minute 10: not for 5 minutes yet
        _fires(STALLED, 16, "c"),
        _fires(STALLED, 29, "c"),
        quiet(STALLED, 31),
    ]
    done = rule_test(tmp_path / "relay-slow-test.yml", SLOW, cases)
    assert done.returncode == 0, done.stdout + done.stderr


# Relay d: NATS stops acknowledging at minute 6 and answers again at minute 16. Relay e: one failed publish at
# minute 3, acknowledged again two minutes later (an election, a restart of one node).
BROKER = _series("broker_up", "d", "1x5 0x10 1x10") + _series("broker_up", "e", "1x2 0x1 1x22")


def test_the_broker_down_fires_after_3_minutes_without_an_acknowledgement_and_not_for_a_blip(tmp_path: Path) -> None:
    cases = [
        quiet(BROKER_DOWN, 4),  # e's two minutes at 0
        quiet(BROKER_DOWN, 8),  # d's at 0 since minute 6: not for 3 minutes yet
        _fires(BROKER_DOWN, 10, "d"),
        _fires(BROKER_DOWN, 15, "d"),
        quiet(BROKER_DOWN, 17),
    ]
    done = rule_test(tmp_path / "relay-broker-test.yml", BROKER, cases)
    assert done.returncode == 0, done.stdout + done.stderr


# The relay reports for 10 minutes, then nothing (gone, or no longer scraped) until minute 40, then again.
GONE = _series("cursor_index", "f", "3x10 _x29 3x20")


def test_no_relay_series_fires_the_absence_alert_after_5_minutes_and_clears_when_one_reports(tmp_path: Path) -> None:
    cases = [
        quiet(ABSENT, 5),
        quiet(ABSENT, 17),  # the last sample (minute 10) goes stale after 5 minutes; absent since 15, not for 5 yet
        _fires(ABSENT, 22),
        _fires(ABSENT, 39),
        quiet(ABSENT, 41),
    ]
    done = rule_test(tmp_path / "relay-absent-test.yml", GONE, cases)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_relay_rules_read_only_the_relays_series_and_page() -> None:
    rules = {r["alert"]: r for r in alert_rules() if r["alert"].startswith("DecisionflowRelay")}
    assert set(rules) == {STALLED, BROKER_DOWN, ABSENT}
    for name, rule in rules.items():
        assert rule["labels"]["severity"] == "page" and rule.get("for"), name
        assert "decisionflow_relay_" in rule["expr"] and "docs/metrics.md" in rule["annotations"]["description"]
    [down] = [r for r in alert_rules() if r["alert"] == "DecisionflowServiceDown"]
    assert "relay" in down["expr"]
