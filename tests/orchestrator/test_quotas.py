"""The per-author buckets on their own (orchestrator.quotas): a refusal charges nothing, and the memory they
hold is bounded without handing a spent budget back to the principal that spent it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orchestrator import quotas
from orchestrator.errors import CallRateExceeded, ContentBudgetExceeded
from orchestrator.quotas import AuthorBudgets, AuthorLimits


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_refused_call_charges_neither_budget() -> None:
    clock = Clock()
    budgets = AuthorBudgets(AuthorLimits(1.0, 1, 1200, 0), monotonic=clock)
    budgets.admit("ava", 1000)
    with pytest.raises(CallRateExceeded):
        budgets.admit("ava", 10)
    clock.now += 1.0  # one call back, and 20 bytes: 220 in the bucket
    with pytest.raises(ContentBudgetExceeded) as refused:
        budgets.admit("ava", 1000)
    assert refused.value.retry_after == timedelta(seconds=39)  # 780 bytes at 20 a second
    budgets.admit("ava", 10)  # the content refusal took neither the call nor the bytes


def test_a_request_larger_than_the_whole_budget_waits_for_a_full_bucket() -> None:
    clock = Clock()
    budgets = AuthorBudgets(AuthorLimits(0, 1, 600, 0), monotonic=clock)
    budgets.admit("ava", 900)  # a full bucket admits it, and is emptied
    with pytest.raises(ContentBudgetExceeded) as refused:
        budgets.admit("ava", 900)
    assert refused.value.retry_after == timedelta(seconds=60)


def test_forgetting_principals_drops_full_buckets_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quotas, "MAX_PRINCIPALS", 2)
    budgets = AuthorBudgets(AuthorLimits(0, 1, 600, 0), monotonic=Clock())
    budgets.admit("spender", 600)
    budgets.admit("idle", 0)  # its bucket stays full
    budgets.admit("third", 0)  # over the bound: the full bucket is forgotten, not the least recent spent one
    with pytest.raises(ContentBudgetExceeded):
        budgets.admit("spender", 600)


def test_with_no_full_bucket_the_least_recent_principal_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quotas, "MAX_PRINCIPALS", 2)
    budgets = AuthorBudgets(AuthorLimits(1.0, 1, 0, 0), monotonic=Clock())
    for principal in ("first", "second", "third"):
        budgets.admit(principal, 0)
    budgets.admit("first", 0)  # forgotten, so it starts again with a full bucket
    with pytest.raises(CallRateExceeded):
        budgets.admit("third", 0)
