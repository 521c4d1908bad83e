"""The reconciler's rules on their own: what one lookup allows for one open operation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from decisionflow.vocabulary import LookupStatus, OperationId, OperationState
from reconciler.domain import (
    Action,
    LookupFinding,
    OpenOperation,
    PassSummary,
    RedriveCounts,
    age_seconds,
    decide,
)

NOW = datetime(2026, 11, 29, 21, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def unknown(first_attempt_ago: timedelta = timedelta(minutes=1), *, approved: bool = True) -> OpenOperation:
    """An UNKNOWN operation decided and first attempted first_attempt_ago."""
    at = NOW - first_attempt_ago
    return OpenOperation(OperationId("op-v1-" + "a" * 64), OperationState.UNKNOWN, approved, at, at)


def never_attempted() -> OpenOperation:
    """An APPROVED operation whose effect was never attempted."""
    return OpenOperation(OperationId("op-v1-" + "b" * 64), OperationState.APPROVED, True, NOW - HOUR, None)


APPLIED = LookupFinding(LookupStatus.APPLIED, strong=True)
APPLIED_EVENTUAL = LookupFinding(LookupStatus.APPLIED, strong=False)
STRONG_NOT_FOUND = LookupFinding(LookupStatus.NOT_FOUND, strong=True)
EVENTUAL_NOT_FOUND = LookupFinding(LookupStatus.NOT_FOUND, strong=False)
FAILED = LookupFinding(LookupStatus.UNSPECIFIED, error="UNAVAILABLE: connection refused")


@pytest.mark.parametrize(
    ("operation", "finding", "retention", "expected"),
    [
        (unknown(), APPLIED, None, Action.SETTLE),
        (unknown(), APPLIED_EVENTUAL, None, Action.SETTLE),
        (unknown(2 * HOUR), APPLIED, HOUR, Action.SETTLE),  # a receipt is proof at any age
        (unknown(), STRONG_NOT_FOUND, None, Action.REDRIVE),
        (unknown(), STRONG_NOT_FOUND, HOUR, Action.REDRIVE),
        (unknown(), EVENTUAL_NOT_FOUND, None, Action.NOTE),
        (unknown(), FAILED, None, Action.NOTE),
        (unknown(2 * HOUR), FAILED, HOUR, Action.NOTE),  # nothing learned: nothing decided
        (unknown(2 * HOUR), STRONG_NOT_FOUND, HOUR, Action.ESCALATE),
        (unknown(2 * HOUR), EVENTUAL_NOT_FOUND, HOUR, Action.ESCALATE),
        (unknown(approved=False), STRONG_NOT_FOUND, None, Action.NOTE),
        (never_attempted(), STRONG_NOT_FOUND, None, Action.REDRIVE),
        (never_attempted(), EVENTUAL_NOT_FOUND, None, Action.REDRIVE),  # no Apply was ever sent
        (never_attempted(), STRONG_NOT_FOUND, timedelta(seconds=1), Action.REDRIVE),  # no attempt, no key
        (never_attempted(), FAILED, None, Action.NOTE),
    ],
)
def test_rules(operation: OpenOperation, finding: LookupFinding, retention: timedelta | None, expected: Action) -> None:
    verdict = decide(operation, finding, key_retention=retention, now=NOW, redrive_enabled=True)
    assert verdict.action is expected, verdict.reason


def test_no_redrive_turns_every_redrive_into_a_note() -> None:
    for operation, finding in ((unknown(), STRONG_NOT_FOUND), (never_attempted(), EVENTUAL_NOT_FOUND)):
        verdict = decide(operation, finding, key_retention=None, now=NOW, redrive_enabled=False)
        assert verdict.action is Action.NOTE
        assert "re-drive disabled" in verdict.reason


def test_retention_margin_escalates_before_the_key_could_expire_in_flight() -> None:
    # First attempt 55 minutes ago, keys kept an hour: a re-drive that takes up to 10 minutes to
    # land could arrive after the key is gone.
    operation = unknown(timedelta(minutes=55))
    inside = decide(operation, STRONG_NOT_FOUND, key_retention=HOUR, now=NOW, redrive_enabled=True)
    assert inside.action is Action.REDRIVE
    margin = timedelta(minutes=10)
    late = decide(operation, STRONG_NOT_FOUND, key_retention=HOUR, now=NOW, redrive_enabled=True, redrive_margin=margin)
    assert late.action is Action.ESCALATE
    assert "retention" in late.reason


def test_failed_lookup_reason_carries_the_error() -> None:
    verdict = decide(unknown(), FAILED, key_retention=None, now=NOW, redrive_enabled=True)
    assert verdict.reason == "lookup failed: UNAVAILABLE: connection refused"


def test_age_runs_from_the_decision() -> None:
    decided = OpenOperation(OperationId("op"), OperationState.UNKNOWN, True, NOW - HOUR, NOW - timedelta(minutes=1))
    assert age_seconds(decided, NOW) == 3600
    assert age_seconds(OpenOperation(OperationId("op"), OperationState.UNKNOWN, True, None, None), NOW) == 0


def test_summary_json_names_every_count() -> None:
    summary = PassSummary(
        examined=7,
        settled=3,
        already_settled=1,
        redriven=RedriveCounts(committed=1, unknown=1, already_settled=1),
        noted=1,
        escalated=0,
        lookup_failures=0,
        still_unknown=2,
        oldest_unknown_age_seconds=400.0,
        unknown_older_than_alert=1,
        alert_after_seconds=300.0,
        duration_seconds=0.25,
    )
    assert summary.alerting
    assert summary.as_json() == {
        "examined": 7,
        "settled": 3,
        "already_settled": 1,
        "redriven": 3,
        "redrive_outcomes": {"committed": 1, "unknown": 1, "rejected": 0, "already_settled": 1, "failed": 0},
        "noted": 1,
        "escalated": 0,
        "lookup_failures": 0,
        "still_unknown": 2,
        "oldest_unknown_age_seconds": 400.0,
        "unknown_older_than_alert": 1,
        "alert_after_seconds": 300.0,
        "duration_seconds": 0.25,
        "completed": True,
    }
