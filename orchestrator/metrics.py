"""The orchestrator's Prometheus metrics, on a registry of its own.

Besides the gRPC server families (``decisionflow_server.runtime.metrics``): Approve outcomes, read from each
ApproveResponse; the operations per state and the age of the oldest unconfirmed one, read from the
orchestrator's own database when scraped (so an alert on them needs no reconciler); the bytes of
sealed checkpoints written; the latency of each Apply sent to the receiver and the errors it ended in,
by gRPC code (UNAUTHENTICATED or PERMISSION_DENIED: the receiver refuses the orchestrator itself), with the
time of the last such refusal and of the last Apply the receiver accepted (an alert compares them, so it
fires from a refusal until an Apply succeeds, however long no approval comes in); and the calls refused
because a per-author budget was spent, by reason (orchestrator.quotas); and the audit log's sequencer
lag and newest checkpoint, read from the database when scraped as the operations are, and whether its
sequencer refuses to sign (the log does not extend the published checkpoint); the review timer's
escalations and expiries and the open reviews overdue at its last run; and the periodic jobs' runs
(the audit sequencer, the review timer; decisionflow_server.runtime.periodic). The endpoint also serves
the published checkpoint at ``/checkpoint`` when there is one (``--audit-publish-dir``). The service code
never imports this module: ``orchestrator.main`` hands it the store's hook, the EffectPort to time
and the interceptors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from decisionflow import reasons
from decisionflow.v1 import common_pb2, review_pb2
from decisionflow.vocabulary import EffectRequest, OperationState, Receipt
from decisionflow_server.runtime.metrics import (
    GrpcServerMetrics,
    MetricsServer,
    register_process_metrics,
    serve_metrics,
)
from decisionflow_server.runtime.periodic import PeriodicMetrics
from decisionflow_server.runtime.served_calls import Observers
from orchestrator.audit.publication import CHECKPOINT_NAME, CheckpointDirectory
from orchestrator.audit_log.progress import AuditStatus
from orchestrator.config import SERVER
from orchestrator.domain import OperationTally
from orchestrator.ports import EffectIndeterminate, EffectPort, EffectRefused

logger = logging.getLogger("decisionflow.orchestrator")
T = TypeVar("T")

APPROVE_METHOD = "/" + review_pb2.DESCRIPTOR.services_by_name["ReviewService"].full_name + "/Approve"
# The outcome label takes the names of the Approve response's enum: committed, declined, rejected, unknown.
OUTCOMES = {
    number: name.removeprefix("OUTCOME_").lower()
    for name, number in common_pb2.Outcome.items()
    if number != common_pb2.OUTCOME_UNSPECIFIED
}
RECEIVER_RESULTS = ("committed", "refused", "indeterminate")
# Present from the start, so an alert on them has a series to read before the first error.
RECEIVER_ERROR_CODES = (
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "UNAVAILABLE",
    "DEADLINE_EXCEEDED",
)
# The receiver refusing the orchestrator's own credentials: no approval commits until they are fixed.
CREDENTIAL_REFUSAL_CODES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
# The refusals of a spent per-author budget (orchestrator.quotas), present from the start.
QUOTA_REFUSAL_REASONS = (reasons.CALL_RATE_EXCEEDED, reasons.CONTENT_BUDGET_EXCEEDED, reasons.TOO_MANY_OPEN_REVIEWS)
# The Apply budget defaults to 5 s and a caller may allow more; the buckets reach past it.
RECEIVER_CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A scrape storm reads the database at most once per this many seconds.
TALLY_CACHE_SECONDS = 2.0


class CachedRead(Generic[T]):
    """A read of the database for the gauges, made at most once per cache period however many scrapes
    come; None when the database cannot be read (the gauges are then absent from that scrape)."""

    def __init__(self, read: Callable[[], T], what: str, cache_seconds: float, monotonic: Callable[[], float]) -> None:
        self._read = read
        self._what = what
        self._cache_seconds = cache_seconds
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._cached: tuple[float, T] | None = None

    def __call__(self) -> T | None:
        with self._lock:  # concurrent scrapes wait for one read instead of each making their own
            now = self._monotonic()
            if self._cached is not None and now - self._cached[0] < self._cache_seconds:
                return self._cached[1]
            try:
                value = self._read()
            except Exception:  # a scrape must still answer; the absent series say the database did not
                logger.warning("cannot read the %s for metrics", self._what, exc_info=True)
                return None
            self._cached = (now, value)
            return value


class OperationsCollector(Collector):
    """``decisionflow_operations{state}`` and ``decisionflow_oldest_unknown_age_seconds``, computed
    at scrape time by one aggregate read of the store, cached for a couple of seconds."""

    def __init__(
        self,
        tally: Callable[[], OperationTally],
        clock: Callable[[], datetime],
        *,
        cache_seconds: float = TALLY_CACHE_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._current = CachedRead(tally, "operations", cache_seconds, monotonic)
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the two gauges (nothing when the database cannot be read)."""
        tally = self._current()
        if tally is None:
            return
        states = GaugeMetricFamily(
            "decisionflow_operations", "Operations in the orchestrator's database, by state", labels=["state"]
        )
        for state in OperationState:
            if state is not OperationState.UNSPECIFIED:  # a word of the wire only, never stored
                states.add_metric([state.name], tally.by_state.get(state, 0))
        yield states
        age = 0.0
        if tally.oldest_open_decided_at is not None:
            age = max(0.0, (self._clock() - tally.oldest_open_decided_at).total_seconds())
        yield GaugeMetricFamily(
            "decisionflow_oldest_unknown_age_seconds",
            "Seconds since the decision of the oldest operation whose effect is not confirmed "
            "(APPROVED or UNKNOWN); 0 when there is none",
            value=age,
        )


def _age(clock: Callable[[], datetime], since: datetime | None) -> float:
    return 0.0 if since is None else max(0.0, (clock() - since).total_seconds())


class AuditCollector(Collector):
    """The audit log's gauges (docs/metrics.md), read from the orchestrator's database at scrape time by
    one read of the store, cached as the operations gauges are. ``signing``: this process signs
    checkpoints, and so reports how long sequenced leaves have waited for one."""

    def __init__(
        self,
        status: Callable[[], AuditStatus],
        clock: Callable[[], datetime],
        *,
        signing: bool,
        cache_seconds: float = TALLY_CACHE_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._current = CachedRead(status, "audit log", cache_seconds, monotonic)
        self._clock = clock
        self._signing = signing

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the audit log's gauges (nothing when the database cannot be read)."""
        status = self._current()
        if status is None:
            return
        yield GaugeMetricFamily(
            "decisionflow_audit_unsequenced_entries",
            "Audit log entries written with their events but not yet sequenced (given an index)",
            value=status.unsequenced,
        )
        yield GaugeMetricFamily(
            "decisionflow_audit_oldest_unsequenced_age_seconds",
            "Seconds since the event of the oldest audit log entry not yet sequenced; 0 when there is none",
            value=_age(self._clock, status.oldest_unsequenced_at),
        )
        yield GaugeMetricFamily(
            "decisionflow_audit_sequenced_leaves", "Leaves in the audit log: its size", value=status.size
        )
        yield GaugeMetricFamily(
            "decisionflow_audit_checkpoint_size",
            "The size of the audit log's newest signed checkpoint; 0 before the first",
            value=status.checkpoint_size,
        )
        if status.checkpoint_signed_at is not None:
            yield GaugeMetricFamily(
                "decisionflow_audit_checkpoint_age_seconds",
                "Seconds since the audit log's newest checkpoint was signed (absent before the first)",
                value=_age(self._clock, status.checkpoint_signed_at),
            )
        if self._signing:
            yield GaugeMetricFamily(
                "decisionflow_audit_unsigned_age_seconds",
                "Seconds since the event of the first sequenced leaf no signed checkpoint covers; 0 when the "
                "newest covers every one (only from orchestrators with a signing key)",
                value=_age(self._clock, status.oldest_unsigned_at),
            )


class TimedEffects:
    """An EffectPort that times each Apply of the one it wraps, by how the call ended, and counts its errors."""

    def __init__(
        self, effects: EffectPort, observe: Callable[[str, float], None], count_error: Callable[[str], None]
    ) -> None:
        self._effects = effects
        self._observe = observe
        self._count_error = count_error

    async def apply(self, request: EffectRequest, *, deadline: float | None) -> Receipt:
        """Apply through the wrapped port, recording the call's duration and result."""
        began = time.perf_counter()
        result = "indeterminate"
        try:
            receipt = await self._effects.apply(request, deadline=deadline)
            result = "committed"
            return receipt
        except EffectRefused as refused:
            result = "refused"
            self._count_error(refused.code or "UNKNOWN")
            raise
        except EffectIndeterminate as unknown:
            self._count_error(unknown.code or "UNKNOWN")
            raise
        finally:
            self._observe(result, time.perf_counter() - began)


class OrchestratorMetrics:
    """Every metric of one orchestrator server, on its own registry."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, published: CheckpointDirectory | None = None
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self._published = published
        register_process_metrics(self.registry)
        self.grpc = GrpcServerMetrics(self.registry)
        self.approvals = Counter(
            "decisionflow_approvals",
            "Approve calls answered, by outcome and whether the answer replayed a recorded decision",
            ["outcome", "replay"],
            registry=self.registry,
        )
        for outcome in OUTCOMES.values():
            for replay in ("false", "true"):
                self.approvals.labels(outcome=outcome, replay=replay)
        self.checkpoint_bytes = Counter(
            "decisionflow_checkpoint_bytes",
            "Bytes of sealed workflow checkpoint state written to the database",
            registry=self.registry,
        )
        self.receiver_call_seconds = Histogram(
            "decisionflow_receiver_call_seconds",
            "Duration of the orchestrator's Apply calls to the receiver (retries included), by result",
            ["result"],
            buckets=RECEIVER_CALL_BUCKETS,
            registry=self.registry,
        )
        for result in RECEIVER_RESULTS:
            self.receiver_call_seconds.labels(result=result)
        self.receiver_call_errors = Counter(
            "decisionflow_receiver_call_errors",
            "The orchestrator's Apply calls to the receiver that ended in an error (after retries), by gRPC code",
            ["code"],
            registry=self.registry,
        )
        for code in RECEIVER_ERROR_CODES:
            self.receiver_call_errors.labels(code=code)
        self.receiver_last_refusal = Gauge(
            "decisionflow_receiver_last_refusal_timestamp_seconds",
            "Unix time of the last Apply the receiver refused with UNAUTHENTICATED or PERMISSION_DENIED (it "
            "refused the orchestrator's credentials); 0 when none since this process started",
            registry=self.registry,
        )
        self.quota_refusals = Counter(
            "decisionflow_quota_refusals",
            "StartReview and EditProposal calls refused because the caller's budget was spent, by ErrorInfo "
            "reason: CALL_RATE_EXCEEDED, CONTENT_BUDGET_EXCEEDED (RESOURCE_EXHAUSTED) or TOO_MANY_OPEN_REVIEWS "
            "(FAILED_PRECONDITION)",
            ["reason"],
            registry=self.registry,
        )
        for reason in QUOTA_REFUSAL_REASONS:
            self.quota_refusals.labels(reason=reason)
        self.receiver_last_applied = Gauge(
            "decisionflow_receiver_last_applied_timestamp_seconds",
            "Unix time of the last Apply the receiver accepted (created or replayed); 0 when none since this "
            "process started",
            registry=self.registry,
        )
        self.audit_signing_refused = Gauge(
            "decisionflow_audit_signing_refused",
            "1 while this process's audit sequencer refuses to sign because the log in the database does not "
            "extend the checkpoint published outside it (a restored database: docs/operations.md); else 0",
            registry=self.registry,
        )
        self.event_streams = Gauge(
            "decisionflow_event_streams",
            "WatchEvents streams open on this process (docs/events.md)",
            registry=self.registry,
        )
        self.periodic = PeriodicMetrics(self.registry)
        self.review_escalations = Counter(
            "decisionflow_review_escalations",
            "Stages of reviews under a rule escalated by the review timer once due",
            registry=self.registry,
        )
        self.review_expiries = Counter(
            "decisionflow_review_expiries",
            "Reviews under a rule the review timer expired past their rule's deadline",
            registry=self.registry,
        )
        self.reviews_overdue = Gauge(
            "decisionflow_reviews_overdue",
            "Open reviews under a rule whose current stage is past its due time, at the review timer's last run "
            "in this process (0 before its first, and in a replica whose runs another replica takes)",
            registry=self.registry,
        )
        self.review_oldest_overdue = Gauge(
            "decisionflow_review_oldest_overdue_seconds",
            "Seconds the longest-overdue open review is past its current stage's due time, at the review timer's "
            "last run in this process; 0 when none is overdue",
            registry=self.registry,
        )

    def record_review_timer(self, escalated: int, expired: int, overdue: int, oldest_overdue_seconds: float) -> None:
        """Count one review timer run's escalations and expiries and set the overdue gauges to what it saw."""
        self.review_escalations.inc(escalated)
        self.review_expiries.inc(expired)
        self.reviews_overdue.set(overdue)
        self.review_oldest_overdue.set(oldest_overdue_seconds)

    def count_quota_refusal(self, reason: str) -> None:
        """Count one call refused for a spent per-author budget."""
        self.quota_refusals.labels(reason=reason).inc()

    def record_approval(self, response: review_pb2.ApproveResponse) -> None:
        """Count one Approve answer."""
        outcome = OUTCOMES.get(response.outcome, "unspecified")
        self.approvals.labels(outcome=outcome, replay="true" if response.replay else "false").inc()

    def answers(self) -> Observers:
        """Return the observer that counts Approve outcomes (it sees each answer before the status mapping)."""
        return Observers({APPROVE_METHOD: self.record_approval})

    def timed(self, effects: EffectPort) -> EffectPort:
        """Return effects with each Apply timed on decisionflow_receiver_call_seconds, each error counted on
        decisionflow_receiver_call_errors_total, and the times of the last accepted Apply and of the last refusal
        of the credentials noted."""
        return TimedEffects(effects, self._observe_apply, self._count_receiver_error)

    def _observe_apply(self, result: str, seconds: float) -> None:
        self.receiver_call_seconds.labels(result).observe(seconds)
        if result == "committed":
            self.receiver_last_applied.set_to_current_time()

    def _count_receiver_error(self, code: str) -> None:
        self.receiver_call_errors.labels(code).inc()
        if code in CREDENTIAL_REFUSAL_CODES:
            self.receiver_last_refusal.set_to_current_time()

    def watch(self, tally: Callable[[], OperationTally], clock: Callable[[], datetime]) -> None:
        """Report the operations gauges from tally (the store's) at scrape time."""
        self.registry.register(OperationsCollector(tally, clock))

    def watch_audit(self, status: Callable[[], AuditStatus], clock: Callable[[], datetime], *, signing: bool) -> None:
        """Report the audit log's gauges from status (the store's) at scrape time."""
        self.registry.register(AuditCollector(status, clock, signing=signing))

    def serve(self, port: int, address: str) -> MetricsServer:
        """Serve the registry over HTTP; raise StartupError when address:port cannot be bound."""
        files = {} if self._published is None else {"/" + CHECKPOINT_NAME: self._published.read_bytes}
        return serve_metrics(self.registry, port, address, SERVER.metrics, files=files)
