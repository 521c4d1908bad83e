"""Campaign clients: reviewers whose every call goes through the real ReviewClient and into the history."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import grpc

from decisionflow.channels import insecure_channel
from decisionflow.client import (
    ApproveResult,
    Decision,
    DecisionflowError,
    EffectRecord,
    EvidenceItem,
    LookupAnswer,
    OperationsClient,
    OperationState,
    OperationView,
    PolicyRef,
    ReceiverClient,
    ReviewClient,
)
from decisionflow.identity import identities, normalise
from decisionflow.retry import RetryPolicy
from tests.campaigns.auditlog import AuditCheck
from tests.campaigns.cluster import Cluster, ReconcilerRun
from tests.campaigns.history import CheckResult, History, check, load

ACTION = "record_support_review"
POLICY = PolicyRef("support-replies", "2026-10", allowance_units=9)
EVIDENCE = (
    EvidenceItem("HOLD-7", 2, "Firmware 4.2.0 may hold."),
    EvidenceItem("KB-12", 1, "Update to 4.2.1."),
)
# A quick reconnect after a server restart: the default first back-off is a whole second.
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 100),
)
# A reviewer's client: a few quick tries (about a second of waits), so a crash shows as an
# indeterminate call rather than a hang, while a process that is back in time is reached.
CAMPAIGN_POLICY = RetryPolicy(
    name="campaign",
    max_attempts=5,
    max_total_seconds=5.0,
    initial_backoff=0.1,
    max_backoff=0.5,
    multiplier=2.0,
)
# A caller of the outage campaigns declines every fifth case it starts, and pauses this long after
# a StartReview that failed, so a caller without retries does not spin through an outage.
DECLINE_EVERY = 5
RETRY_PAUSE_SECONDS = 0.05
ALL_STATES = tuple(s for s in OperationState if s is not OperationState.UNSPECIFIED)


def body_for(case_id: str, revision: int = 0) -> str:
    """The proposal text of a case; each revision is a different operation."""
    text = f"Case {case_id}: a known firmware issue (HOLD-7); please update to 4.2.1."
    return text + f" Revision {revision}." if revision else text


def operation_id_of(case_id: str, body: str, evidence: Sequence[EvidenceItem] = EVIDENCE) -> str:
    """The operation id the orchestrator will give this content (computed here, before any call)."""
    ordered = sorted(evidence, key=lambda e: e.source_id)
    return identities(case_id, ACTION, normalise(body), ordered, POLICY).operation_id


def channel(target: str) -> grpc.Channel:
    """A client channel with the project's fixed options and a quick reconnect."""
    return insecure_channel(target, options=CHANNEL_OPTIONS)


@dataclass
class Reviewer:
    """One client process of the history: starts, edits and decides through ReviewClient."""

    name: str
    client: ReviewClient
    history: History
    last_error: DecisionflowError | None = None

    @classmethod
    def connect(
        cls, name: str, target: str, history: History, *, timeout: float = 3.0, policy: RetryPolicy = CAMPAIGN_POLICY
    ) -> tuple[Reviewer, grpc.Channel]:
        """A reviewer on a new channel to target, and the channel (for the caller to close)."""
        ch = channel(target)
        return cls(name, ReviewClient(ch, timeout=timeout, policy=policy), history), ch

    def start(self, case_id: str, revision: int = 0) -> str | None:
        """Start a review of the case's proposal; return its operation id, or None if the call failed."""
        body = body_for(case_id, revision)
        op = operation_id_of(case_id, body)
        try:
            with self.history.call(self.name, "start", op, case_id) as done:
                started = self.client.start_review(case_id, ACTION, body, EVIDENCE, POLICY)
                done.finish("ok", outcome="CREATED" if started.created else "EXISTING")
        except DecisionflowError as error:
            self.last_error = error
            return None
        # The history names the id computed here; the server must have computed the same one.
        assert started.proposal.operation_id == op, (started.proposal.operation_id, op)
        return op

    def edit(self, case_id: str, expected_operation_id: str, revision: int) -> str | None:
        """Edit the case's proposal to a new revision; return the new operation id, or None if refused or lost."""
        body = body_for(case_id, revision)
        op = operation_id_of(case_id, body)
        try:
            with self.history.call(self.name, "edit", op, case_id) as done:
                edited = self.client.edit_proposal(expected_operation_id, body, EVIDENCE, POLICY)
                done.finish("ok", outcome="EDITED")
        except DecisionflowError as error:
            self.last_error = error
            return None
        assert edited.proposal.operation_id == op, (edited.proposal.operation_id, op)
        return op

    def decide(self, case_id: str, op: str, decision: Decision) -> ApproveResult | DecisionflowError:
        """Approve or decline op; return the answer or the typed error (both are in the history)."""
        call = "approve" if decision is Decision.APPROVE else "decline"
        try:
            with self.history.call(self.name, call, op, case_id) as done:
                result = self.client.decide(op, decision)
                done.answered(result)
        except DecisionflowError as error:
            return error
        return result


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


@dataclass(frozen=True)
class Observed:
    """What the services hold for a set of cases: effects, lookups and the orchestrator's operations."""

    effects: tuple[EffectRecord, ...]
    lookups: dict[str, LookupAnswer]
    operations: dict[str, OperationView]

    def decisions(self) -> dict[str, Decision]:
        """The recorded decision of every operation that has one."""
        return {op: v.decision for op, v in self.operations.items() if v.decision is not Decision.UNSPECIFIED}

    def effects_by_op(self) -> dict[str, list[EffectRecord]]:
        """Effects grouped by operation id."""
        grouped: dict[str, list[EffectRecord]] = {}
        for effect in self.effects:
            grouped.setdefault(effect.operation_id, []).append(effect)
        return grouped


Connect = Callable[[str], grpc.Channel]


def observe(
    receiver_target: str,
    orchestrator_target: str,
    case_ids: Iterable[str],
    operation_ids: Iterable[str],
    connect: Connect = channel,
) -> Observed:
    """Read effects (ListEffects per case), Lookups and every operation's state through the real APIs."""
    cases, ops = sorted(set(case_ids)), sorted(set(operation_ids))
    receiver_channel, orchestrator_channel = connect(receiver_target), connect(orchestrator_target)
    try:
        receiver = ReceiverClient(receiver_channel, timeout=10)
        effects = tuple(e for case in cases for e in receiver.list_effects(case, page_size=100))
        lookups: dict[str, LookupAnswer] = {}
        for chunk in _chunks(ops, 1000):
            lookups.update((a.operation_id, a) for a in receiver.batch_lookup(chunk).results)
        wanted = set(ops)
        listing = OperationsClient(orchestrator_channel, timeout=10).list_operations(ALL_STATES, page_size=1000)
        operations = {v.operation_id: v for v in listing if v.operation_id in wanted}
    finally:
        receiver_channel.close()
        orchestrator_channel.close()
    return Observed(effects, lookups, operations)


def check_history(
    history: History,
    receiver_target: str,
    orchestrator_target: str,
    *,
    cases: Iterable[str] | None = None,
    connect: Connect = channel,
) -> tuple[CheckResult, Observed]:
    """Check the history's events (of the given cases, or all) against what the services hold now."""
    wanted = None if cases is None else set(cases)
    events = [e for e in load(history.path) if wanted is None or e.case in wanted]
    observed = observe(
        receiver_target, orchestrator_target, (e.case for e in events), (e.op for e in events if e.op), connect
    )
    return check(events, observed.effects, observed.lookups, observed.decisions()), observed


def state_violations(observed: Observed, *, settled: bool) -> list[str]:
    """The orchestrator's states against the effects: COMMITTED ⇔ effect with its receipt, DECLINED ⇒ none.

    With settled, no operation may be left APPROVED or UNKNOWN, and none REJECTED (no campaign
    sends a payload the receiver could refuse).
    """
    violations = []
    effects = observed.effects_by_op()
    for op, view in sorted(observed.operations.items()):
        stored = effects.get(op, [])
        if len(stored) > 1:
            violations.append(f"{op}: {len(stored)} effects")
        if view.state is OperationState.COMMITTED:
            if not stored or stored[0].receipt.receipt_id != view.receipt_id:
                violations.append(f"{op}: COMMITTED with receipt {view.receipt_id}, stored {len(stored)} effects")
        elif view.decision is not Decision.APPROVE and stored:
            violations.append(f"{op}: {view.state.value} without an approval, yet {len(stored)} effects")
        if settled and view.state in (OperationState.APPROVED, OperationState.UNKNOWN, OperationState.REJECTED):
            violations.append(f"{op}: left {view.state.value} after the reconciler pass")
        if settled and view.decision is Decision.APPROVE and len(stored) != 1:
            violations.append(f"{op}: approved, but {len(stored)} effects after the reconciler pass")
    return violations


@dataclass(frozen=True)
class Settled:
    """One reconciler pass after the faults stopped, and what the checks found afterwards."""

    run: ReconcilerRun
    result: CheckResult
    states: list[str]
    observed: Observed
    audit: AuditCheck

    def failures(self) -> list[str]:
        """Everything that is wrong: the pass's exit status, history violations, state violations, and
        what the audit log's check found."""
        problems = []
        if self.run.exitcode != 0 or self.run.summary.get("still_unknown") != 0:
            problems.append("the reconciler pass did not settle everything: " + self.run.describe())
        return problems + self.result.violations + self.states + self.audit.failures


def settle_and_check(
    cluster: Cluster, history: History, cases: Iterable[str] | None = None, connect: Connect = channel
) -> Settled:
    """Run one reconciler pass, then check the history (of cases) and the operations' states, and the whole
    audit log of the orchestrators' database (tests.campaigns.auditlog)."""
    run = cluster.reconcile_once()
    result, observed = check_history(
        history, cluster.receiver.target, cluster.orchestrators[0].target, cases=cases, connect=connect
    )
    return Settled(run, result, state_violations(observed, settled=True), observed, cluster.audit.check())


def review_until(reviewer: Reviewer, stop: threading.Event) -> None:
    """Start case <name>-N and decide it (every DECLINE_EVERY-th declined), N = 0, 1, ..., until stop is set."""
    n = 0
    while not stop.is_set():
        case = f"{reviewer.name}-{n}"
        n += 1
        op = reviewer.start(case)
        if op is None:
            time.sleep(RETRY_PAUSE_SECONDS)
            continue
        reviewer.decide(case, op, Decision.DECLINE if n % DECLINE_EVERY == 0 else Decision.APPROVE)
