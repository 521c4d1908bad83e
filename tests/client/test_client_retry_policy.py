"""decisionflow.retry: which failures are retried, how long the waits are, when retrying stops."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import grpc
import pytest

from decisionflow import retry
from decisionflow.retry import RetryPolicy

from .client_standin import FakeClock, Sleeps

FAST_ATTEMPTS = 6
FAST = RetryPolicy(
    "test_fast", FAST_ATTEMPTS, max_total_seconds=60.0, initial_backoff=0.1, max_backoff=0.5, multiplier=2.0
)


class CallFailed(grpc.RpcError):
    """A failed call as grpc raises it: code() and details()."""

    def __init__(self, code: grpc.StatusCode, details: str = "scripted") -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def failing(errors: list[BaseException], result: str = "ok") -> tuple[Callable[[], str], list[int]]:
    """Return a function that raises errors in order, then returns result, and its call counter."""
    calls = [0]

    def attempt() -> str:
        calls[0] += 1
        if errors:
            raise errors.pop(0)
        return result

    return attempt, calls


@pytest.mark.parametrize(
    "code",
    [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED],
)
def test_transient_failures_are_retried_until_an_answer(code: grpc.StatusCode) -> None:
    sleeps = Sleeps()
    attempt, calls = failing([CallFailed(code), CallFailed(code)])

    assert retry.retrying(FAST, sleep=sleeps)(attempt) == "ok"
    assert calls[0] == 3
    assert len(sleeps.waits) == 2


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.CANCELLED,
    ],
)
def test_other_failures_are_raised_at_once(code: grpc.StatusCode) -> None:
    sleeps = Sleeps()
    error = CallFailed(code)
    attempt, calls = failing([error])

    with pytest.raises(CallFailed) as raised:
        retry.retrying(FAST, sleep=sleeps)(attempt)
    assert raised.value is error
    assert calls[0] == 1
    assert sleeps.waits == []


def test_errors_that_are_not_grpc_failures_are_not_retried() -> None:
    attempt, calls = failing([ValueError("bug")])

    with pytest.raises(ValueError, match="bug"):
        retry.retrying(FAST, sleep=Sleeps())(attempt)
    assert calls[0] == 1


def test_a_message_over_the_size_limit_is_not_retried() -> None:
    too_big = CallFailed(grpc.StatusCode.RESOURCE_EXHAUSTED, "CLIENT: Sent message larger than max (2 vs. 1)")
    attempt, calls = failing([too_big])

    with pytest.raises(CallFailed):
        retry.retrying(FAST, sleep=Sleeps())(attempt)
    assert calls[0] == 1


def test_stops_after_max_attempts_and_reraises_the_last_error() -> None:
    sleeps = Sleeps()
    errors: list[BaseException] = [CallFailed(grpc.StatusCode.UNAVAILABLE) for _ in range(10)]
    last = errors[FAST_ATTEMPTS - 1]
    attempt, calls = failing(errors)

    with pytest.raises(CallFailed) as raised:
        retry.retrying(FAST, sleep=sleeps)(attempt)
    assert raised.value is last
    assert calls[0] == FAST_ATTEMPTS
    assert len(sleeps.waits) == FAST_ATTEMPTS - 1


def test_waits_are_jittered_within_a_growing_window_capped_at_max_backoff() -> None:
    runs = 200
    by_attempt: list[list[float]] = [[] for _ in range(FAST_ATTEMPTS - 1)]
    for _ in range(runs):
        sleeps = Sleeps()
        attempt, _ = failing([CallFailed(grpc.StatusCode.UNAVAILABLE) for _ in range(10)])
        with pytest.raises(CallFailed):
            retry.retrying(FAST, sleep=sleeps)(attempt)
        for n, wait in enumerate(sleeps.waits):
            by_attempt[n].append(wait)

    windows = [FAST.window(n + 1) for n in range(len(by_attempt))]
    assert windows == [0.1, 0.2, 0.4, 0.5, 0.5]
    for window, waits in zip(windows, by_attempt, strict=True):
        assert len(waits) == runs
        assert all(0.0 <= w <= window for w in waits)
        assert len(set(waits)) > runs // 2  # jittered, not a fixed schedule
    # The window grows: later waits reach well past the first window.
    assert max(by_attempt[2]) > FAST.window(1) * 2
    assert max(max(waits) for waits in by_attempt) <= FAST.max_backoff


def test_resource_exhausted_waits_at_least_half_the_window() -> None:
    for _ in range(50):
        sleeps = Sleeps()
        attempt, _ = failing([CallFailed(grpc.StatusCode.RESOURCE_EXHAUSTED) for _ in range(10)])
        with pytest.raises(CallFailed):
            retry.retrying(FAST, sleep=sleeps)(attempt)
        for n, wait in enumerate(sleeps.waits, start=1):
            assert FAST.window(n) / 2 <= wait <= FAST.window(n)


def test_no_wait_ends_after_the_deadline() -> None:
    clock = FakeClock()
    sleeps = Sleeps(clock)
    patient = RetryPolicy("test_patient", 1000, 3600.0, initial_backoff=0.1, max_backoff=0.4, multiplier=2.0)
    deadline = clock() + 2.0
    attempt, calls = failing([CallFailed(grpc.StatusCode.UNAVAILABLE) for _ in range(1000)])

    with pytest.raises(CallFailed):
        retry.retrying(patient, sleep=sleeps, deadline=deadline, clock=clock)(attempt)

    assert sleeps.waits, "the deadline left room for some retries"
    for started, wait in zip(sleeps.started_at, sleeps.waits, strict=True):
        assert started + wait < deadline
    assert calls[0] == len(sleeps.waits) + 1
    assert patient.max_attempts is not None
    assert calls[0] < patient.max_attempts  # the deadline, not the attempt limit, stopped it


def test_a_passed_deadline_allows_one_attempt_and_no_wait() -> None:
    clock = FakeClock()
    sleeps = Sleeps(clock)
    attempt, calls = failing([CallFailed(grpc.StatusCode.UNAVAILABLE) for _ in range(10)])

    with pytest.raises(CallFailed):
        retry.retrying(FAST, sleep=sleeps, deadline=clock() - 1.0, clock=clock)(attempt)
    assert calls[0] == 1
    assert sleeps.waits == []


def test_total_time_bounds_the_retries() -> None:
    brief = RetryPolicy(
        "test_brief", 1000, max_total_seconds=0.3, initial_backoff=0.05, max_backoff=0.05, multiplier=1.0
    )
    attempt, calls = failing([CallFailed(grpc.StatusCode.UNAVAILABLE) for _ in range(1000)])
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)  # real sleeps: tenacity measures total time on the real clock

    with pytest.raises(CallFailed):
        retry.retrying(brief, sleep=sleep)(attempt)

    # Stopped by the total, long before the attempts ran out, and no wait was begun that would end past
    # it (the time the attempts themselves took is the machine's pace, not the policy's).
    assert 1 < calls[0] < 1000
    assert sum(waits) < brief.max_total_seconds


def test_async_retrying_follows_the_same_rules() -> None:
    clock = FakeClock()
    sleeps = Sleeps(clock)
    errors: list[BaseException] = [CallFailed(grpc.StatusCode.DEADLINE_EXCEEDED) for _ in range(3)]

    async def attempt() -> str:
        if errors:
            raise errors.pop(0)
        return "ok"

    async def run() -> str:
        retrier = retry.async_retrying(FAST, sleep=sleeps.async_sleep, deadline=clock() + 60.0, clock=clock)
        async for attempt_manager in retrier:
            with attempt_manager:
                return await attempt()
        raise AssertionError("unreachable")

    assert asyncio.run(run()) == "ok"
    assert len(sleeps.waits) == 3
    assert all(0.0 <= w <= FAST.window(n) for n, w in enumerate(sleeps.waits, start=1))


def test_a_call_without_a_deadline_ends_its_budget_from_now() -> None:
    assert retry.call_deadline(5.0, None, clock=lambda: 100.0) == 105.0
    assert retry.call_deadline(5.0, 42.0, clock=lambda: 100.0) == 42.0


def test_attempt_timeout_is_the_call_timeout_cut_to_the_deadline() -> None:
    clock = FakeClock()
    assert retry.attempt_timeout(5.0, None, clock=clock) == 5.0
    assert retry.attempt_timeout(5.0, clock() + 10.0, clock=clock) == 5.0
    assert retry.attempt_timeout(5.0, clock() + 1.5, clock=clock) == pytest.approx(1.5)
    assert retry.attempt_timeout(5.0, clock() - 1.0, clock=clock) == 0.0


def test_a_policy_that_counts_no_attempts_retries_until_the_deadline() -> None:
    clock = FakeClock()
    sleeps = Sleeps(clock)
    until_deadline = RetryPolicy(
        "test_until_deadline", None, 3600.0, initial_backoff=0.1, max_backoff=0.4, multiplier=2.0
    )
    deadline = clock() + 20.0
    attempt, calls = failing([CallFailed(grpc.StatusCode.UNAVAILABLE) for _ in range(1000)])

    with pytest.raises(CallFailed):
        retry.retrying(until_deadline, sleep=sleeps, deadline=deadline, clock=clock)(attempt)

    assert calls[0] >= 50  # a wait of 0.4 s at most, for 20 s: far beyond any count of attempts
    assert clock() + 0.4 >= deadline  # it stopped only when no wait fit before the deadline


def test_named_policies() -> None:
    assert retry.CLIENT_DEFAULT.max_attempts == 5
    assert retry.CLIENT_DEFAULT.max_total_seconds == 10.0
    assert retry.ORCHESTRATOR_TO_RECEIVER.max_attempts == 8
    assert retry.NO_RETRY.max_attempts == 1
    assert {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED} == retry.TRANSIENT_CODES
    assert retry.TRANSIENT_CODES | {grpc.StatusCode.RESOURCE_EXHAUSTED} == retry.RETRYABLE_CODES


@pytest.mark.parametrize(
    "fields",
    [
        {"max_attempts": 0},
        {"max_total_seconds": 0.0},
        {"initial_backoff": 0.0},
        {"max_backoff": 0.01},
        {"multiplier": 0.5},
    ],
)
def test_policies_refuse_nonsense(fields: dict[str, float]) -> None:
    values: dict[str, float] = {
        "max_attempts": 3,
        "max_total_seconds": 1.0,
        "initial_backoff": 0.1,
        "max_backoff": 1.0,
        "multiplier": 2.0,
    }
    values.update(fields)
    with pytest.raises(ValueError, match="retry policy bad"):
        RetryPolicy(
            "bad",
            int(values["max_attempts"]),
            values["max_total_seconds"],
            values["initial_backoff"],
            values["max_backoff"],
            values["multiplier"],
        )
