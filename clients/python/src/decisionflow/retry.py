"""Named retry policies for gRPC calls, built on tenacity (docs/errors.md).

Only transient failures are retried: UNAVAILABLE and DEADLINE_EXCEEDED, plus
RESOURCE_EXHAUSTED with a real back-off. Waits are jittered exponential ("full jitter",
``wait_random_exponential``), never shorter than the delay the server's google.rpc.RetryInfo
names (a principal's spent budget says when it refills; a database that cannot answer, when to
try again). A call stops retrying at the first of: ``max_attempts`` attempts (when the policy
counts them), ``max_total_seconds`` since the first attempt, or a wait that would end at or
after the caller's deadline (so a RetryInfo delay longer than the time left ends the call at
once, with the typed error carrying ``retry_after``). The last error is re-raised as it was
(``reraise=True``).

gRPC's own retries are off on every channel (``decisionflow.channels``), so the number of
attempts a server sees is the number this module makes: the two layers never multiply.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import grpc
import tenacity

from decisionflow.status_details import retry_delay

logger = logging.getLogger(__name__)

TRANSIENT_CODES: frozenset[grpc.StatusCode] = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
)
# Retried too, but never sooner than half the current window, nor than the delay the server's
# RetryInfo names: the server asked for less load.
BACKOFF_CODES: frozenset[grpc.StatusCode] = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED})
RETRYABLE_CODES: frozenset[grpc.StatusCode] = TRANSIENT_CODES | BACKOFF_CODES

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a call is retried.

    The n-th wait (n from 1) is drawn uniformly from ``[0, min(max_backoff,
    initial_backoff * multiplier ** (n - 1))]``.
    """

    name: str
    """What the retry log lines call it."""
    max_attempts: int | None
    """Attempts at most, the first included; None: no count, the time bounds the retries (a caller's deadline)."""
    max_total_seconds: float
    """Seconds from the first attempt after which no attempt starts; also the call's deadline when it names none."""
    initial_backoff: float
    """The upper bound of the first wait, in seconds."""
    max_backoff: float
    """The largest upper bound of a wait, in seconds."""
    multiplier: float
    """How much the upper bound grows after each attempt."""

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"retry policy {self.name}: max_attempts must be at least 1")
        if self.max_total_seconds <= 0 or self.initial_backoff <= 0:
            raise ValueError(f"retry policy {self.name}: times must be positive")
        if self.max_backoff < self.initial_backoff:
            raise ValueError(f"retry policy {self.name}: max_backoff must be at least initial_backoff")
        if self.multiplier < 1:
            raise ValueError(f"retry policy {self.name}: multiplier must be at least 1")

    def window(self, attempt_number: int) -> float:
        """Return the upper bound of the wait after attempt attempt_number (from 1)."""
        exponent = min(attempt_number - 1, 64)  # beyond that the cap has long applied
        return float(min(self.max_backoff, self.initial_backoff * self.multiplier**exponent))


# Interactive callers (reviewers, operators, the demo): a few quick tries, then report.
CLIENT_DEFAULT = RetryPolicy(
    name="client_default",
    max_attempts=5,
    max_total_seconds=10.0,
    initial_backoff=0.1,
    max_backoff=2.0,
    multiplier=2.0,
)

# Apply from the orchestrator's commit step. In practice the caller's deadline (the time the
# Approve caller has left) is the bound; the attempt and time limits only cap a missing one.
ORCHESTRATOR_TO_RECEIVER = RetryPolicy(
    name="orchestrator_to_receiver",
    max_attempts=8,
    max_total_seconds=30.0,
    initial_backoff=0.05,
    max_backoff=1.0,
    multiplier=2.0,
)

# One attempt: for callers that run their own loop (the reconciler's next pass) or tests.
NO_RETRY = RetryPolicy(
    name="no_retry",
    max_attempts=1,
    max_total_seconds=60.0,
    initial_backoff=0.1,
    max_backoff=0.1,
    multiplier=1.0,
)


def status_code(error: BaseException | None) -> grpc.StatusCode | None:
    """Return the status code of a failed gRPC call, or None for any other exception."""
    if not isinstance(error, grpc.RpcError):
        return None
    code = getattr(error, "code", None)
    if not callable(code):
        return None
    value = code()
    return value if isinstance(value, grpc.StatusCode) else None


def _exceeds_message_limit(error: BaseException | None) -> bool:
    # gRPC reports a message over the channel's size limit as RESOURCE_EXHAUSTED too, but
    # sending the same message again cannot succeed.
    details = getattr(error, "details", None)
    text = details() if callable(details) else None
    return isinstance(text, str) and "larger than max" in text


def is_retryable(error: BaseException | None) -> bool:
    """Return True when error is a gRPC failure worth retrying with the same request."""
    code = status_code(error)
    if code in BACKOFF_CODES and _exceeds_message_limit(error):
        return False
    return code in RETRYABLE_CODES


def call_deadline(budget: float, deadline: float | None, *, clock: Clock = time.monotonic) -> float:
    """Return the ``clock()`` instant a call must end by: the caller's deadline, or budget seconds from now
    when the caller set none."""
    return clock() + budget if deadline is None else deadline


def attempt_timeout(timeout: float, deadline: float | None, *, clock: Clock = time.monotonic) -> float:
    """Return the timeout for one attempt: the per-call timeout, cut to what is left before deadline."""
    if deadline is None:
        return timeout
    # Zero makes gRPC fail the attempt at once with DEADLINE_EXCEEDED: the caller's time is up.
    return max(0.0, min(timeout, deadline - clock()))


class stop_before_deadline(tenacity.stop.stop_base):  # lower case, as tenacity names its strategies
    """Stop when the next wait would end at or after an absolute ``clock()`` deadline."""

    def __init__(self, deadline: float, clock: Clock = time.monotonic) -> None:
        self.deadline = deadline
        self.clock = clock

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        """Return True when no wait may start: it would end after the deadline."""
        return self.clock() + retry_state.upcoming_sleep >= self.deadline


class wait_jittered_backoff(tenacity.wait_random_exponential):
    """Full-jitter exponential wait; after RESOURCE_EXHAUSTED, at least half the window; never shorter
    than the delay of the refusal's RetryInfo (a spent budget, a database that cannot answer)."""

    def __init__(self, policy: RetryPolicy) -> None:
        super().__init__(multiplier=policy.initial_backoff, max=policy.max_backoff, exp_base=policy.multiplier)

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        """Return the next wait in seconds."""
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None and outcome.failed else None
        if status_code(error) in BACKOFF_CODES:
            high = tenacity.wait_exponential.__call__(self, retry_state)
            return max(random.uniform(high / 2, high), retry_delay(error) or 0.0)
        return max(float(super().__call__(retry_state)), retry_delay(error) or 0.0)


def _stop(policy: RetryPolicy, deadline: float | None, clock: Clock) -> tenacity.stop.stop_base:
    stop: tenacity.stop.stop_base = tenacity.stop_before_delay(policy.max_total_seconds)
    if policy.max_attempts is not None:
        stop = stop | tenacity.stop_after_attempt(policy.max_attempts)
    if deadline is not None:
        stop = stop | stop_before_deadline(deadline, clock)
    return stop


LogContext = Mapping[str, object]


def _log_retry(policy: RetryPolicy, context: LogContext | None) -> Callable[[tenacity.RetryCallState], None]:
    # One info line per retry, naming what is retried (context: the operation and case ids), so that
    # during an outage each line still says which operation waits; the caller logs the final outcome.
    def log(retry_state: tenacity.RetryCallState) -> None:
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None else None
        code = status_code(error)
        logger.info(
            "retrying after %s (policy %s, attempt %d, waiting %.3f s)",
            code,
            policy.name,
            retry_state.attempt_number,
            retry_state.upcoming_sleep,
            extra={**(context or {}), "code": code.name if code else None, "attempt": retry_state.attempt_number},
        )

    return log


def retrying(
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
    deadline: float | None = None,
    clock: Clock = time.monotonic,
    log_context: LogContext | None = None,
) -> tenacity.Retrying:
    """Return a tenacity.Retrying that retries transient gRPC failures under policy, never past deadline;
    each retry's log line carries log_context's fields (e.g. operation_id, case_id)."""
    return tenacity.Retrying(
        sleep=sleep,
        stop=_stop(policy, deadline, clock),
        wait=wait_jittered_backoff(policy),
        retry=tenacity.retry_if_exception(is_retryable),
        before_sleep=_log_retry(policy, log_context),
        reraise=True,
    )


def async_retrying(
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    deadline: float | None = None,
    clock: Clock = time.monotonic,
    log_context: LogContext | None = None,
) -> tenacity.AsyncRetrying:
    """Return a tenacity.AsyncRetrying with the same rules as retrying(), sleeping with an awaitable."""
    return tenacity.AsyncRetrying(
        sleep=sleep,
        stop=_stop(policy, deadline, clock),
        wait=wait_jittered_backoff(policy),
        retry=tenacity.retry_if_exception(is_retryable),
        before_sleep=_log_retry(policy, log_context),
        reraise=True,
    )
