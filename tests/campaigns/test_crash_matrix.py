"""Crash matrix: every named failpoint (action exit) and a SIGKILL mid-Approve, each repeated.

Per crash: the process dies for real (a failpoint ``exit`` is an abrupt ``os._exit``; the kill is
SIGKILL), is restarted on the same port, one ``decisionflow-reconciler --once`` pass runs, and then:
at most one effect per operation id, exactly one for every approved operation, no decision lost
or changed against what the clients were told. Each failpoint also has an expectation of its
own (a decision recorded before the crash, an effect already written) checked before the pass.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from decisionflow.client import Decision, LookupStatus, OperationsClient, OperationState, ReceiverClient
from decisionflow_server.runtime.failpoints import EXIT_STATUS
from tests.campaigns.cluster import Cluster, Server
from tests.campaigns.history import History
from tests.campaigns.report import publish, replay_hint
from tests.campaigns.workload import ALL_STATES, Reviewer, channel, settle_and_check
from tests.support.campaigns import CampaignOptions

SIGKILL_MID_APPROVE = "sigkill.mid_approve"


@dataclass(frozen=True)
class CrashPoint:
    """Where the process dies and what must already be durable when it does."""

    name: str
    process: str  # "orchestrator" or "receiver"
    decision_recorded: bool | None  # None: depends on where the kill landed
    effect_written: bool | None


CRASH_POINTS = (
    CrashPoint("orchestrator.after_decision", "orchestrator", True, False),
    CrashPoint("orchestrator.after_attempt", "orchestrator", True, False),
    CrashPoint("orchestrator.after_receiver_ok", "orchestrator", True, True),
    CrashPoint("orchestrator.checkpoint_save", "orchestrator", False, False),
    CrashPoint("receiver.commit_then_exit", "receiver", True, True),
    CrashPoint(SIGKILL_MID_APPROVE, "orchestrator", None, None),
)


def _decided(cluster: Cluster, op: str) -> tuple[Decision, bool]:
    """The orchestrator's recorded decision for op and whether the receiver holds its effect."""
    orchestrator, receiver = channel(cluster.orchestrators[0].target), channel(cluster.receiver.target)
    try:
        views = OperationsClient(orchestrator, timeout=5).list_operations(ALL_STATES, page_size=1000)
        decision = next((v.decision for v in views if v.operation_id == op), Decision.UNSPECIFIED)
        applied = ReceiverClient(receiver, timeout=5).lookup(op).status is LookupStatus.APPLIED
    finally:
        orchestrator.close()
        receiver.close()
    return decision, applied


def _crash_case(cluster: Cluster, history: History, point: CrashPoint, seed: int) -> list[str]:
    """Run one crash of point; return what went wrong (empty when every check held)."""
    reviewer, ch = Reviewer.connect(f"crash-{seed}", cluster.orchestrators[0].target, history, timeout=2.0)
    try:
        return [f"{point.name} (seed {seed}): {p}" for p in _crash(cluster, reviewer, point, seed)]
    except Exception as error:
        return [f"{point.name} (seed {seed}): {type(error).__name__}: {error}"]
    finally:
        ch.close()
        cluster.ensure_all()  # a case that went wrong must not leave the next one without a process


def _crash(cluster: Cluster, reviewer: Reviewer, point: CrashPoint, seed: int) -> list[str]:
    rng = random.Random(f"{point.name}:{seed}")
    case = f"X{seed}-{point.name.split('.')[-1][:12]}"
    decision = Decision.DECLINE if point.name.endswith("after_decision") and seed % 2 else Decision.APPROVE
    orchestrator = cluster.orchestrators[0]
    crashing: Server = orchestrator if point.process == "orchestrator" else cluster.receiver
    spec = f"{point.name}=exit"
    # A fresh process's first checkpoint save is in whichever call comes first: StartReview on even
    # seeds, Approve (before its decision) on odd ones. Every other point fires only in Approve.
    crash_in_start = point.name.endswith("checkpoint_save") and seed % 2 == 0
    op = None if crash_in_start else reviewer.start(case)
    if point.name != SIGKILL_MID_APPROVE:
        crashing.kill()
        crashing.start(extra_argv=["--failpoints", spec])
    problems: list[str] = []
    if point.name == SIGKILL_MID_APPROVE:
        assert op is not None, f"StartReview failed without a crash: {reviewer.last_error}"
        deciding = threading.Thread(target=reviewer.decide, args=(case, op, decision))
        deciding.start()
        time.sleep(rng.uniform(0.0, 0.15))
        status = orchestrator.kill()
        deciding.join()
    else:
        if crash_in_start:
            op = reviewer.start(case)
        if op is not None:
            reviewer.decide(case, op, decision)
        status = crashing.child.wait(5) if crashing.child else None
    expected_status = -9 if point.name == SIGKILL_MID_APPROVE else EXIT_STATUS
    if status != expected_status:
        problems.append(f"{crashing.name} did not crash at {spec}: exit status {status}")
    cluster.ensure_all()  # the restart: same port, no failpoint
    op = op or reviewer.start(case)  # a crash during StartReview: the author starts again
    assert op is not None, f"StartReview failed after the restart: {reviewer.last_error}"
    recorded, applied = _decided(cluster, op)
    if point.decision_recorded is not None and (recorded is not Decision.UNSPECIFIED) != point.decision_recorded:
        problems.append(f"after the crash the decision is {recorded.value}, expected {point.decision_recorded}")
    if point.effect_written is not None and applied != (point.effect_written and decision is Decision.APPROVE):
        problems.append(f"after the crash the effect exists={applied}; expected {point.effect_written}")
    if recorded is Decision.UNSPECIFIED:
        reviewer.decide(case, op, decision)  # nothing was decided before the crash: the reviewer decides now
    settled = settle_and_check(cluster, reviewer.history, [case])
    problems += settled.failures()
    # A reviewer retrying afterwards is told the recorded outcome; the other decision is a conflict
    # (both answers are in the history, checked once the matrix has run).
    reviewer.decide(case, op, decision)
    reviewer.decide(case, op, Decision.DECLINE if decision is Decision.APPROVE else Decision.APPROVE)
    final = settled.observed.operations.get(op)
    expected = OperationState.COMMITTED if decision is Decision.APPROVE else OperationState.DECLINED
    if final is None or final.state is not expected:
        problems.append(f"state {final.state.value if final else None} after the pass, expected {expected.value}")
    return problems


@pytest.mark.campaign
@pytest.mark.slow
def test_crash_matrix(
    campaign: CampaignOptions,
    make_cluster: Callable[..., Cluster],
    history: History,
    request: pytest.FixtureRequest,
) -> None:
    """Each failpoint, repeated: after restart and one reconciler pass every invariant holds."""
    cluster = make_cluster()
    cluster.start()
    if campaign.seed is not None:
        seeds = [campaign.seed]
    else:
        seeds = [campaign.base_seed + r for r in range(campaign.crash_repetitions)]
    failures: list[str] = []
    started = time.monotonic()
    for seed in seeds:
        for point in CRASH_POINTS:
            problems = _crash_case(cluster, history, point, seed)
            failures += [f"{p}\n    {replay_hint(request.node.nodeid, seed)}" for p in problems]
    settled = settle_and_check(cluster, history)
    failures += settled.failures()
    publish(
        "crash_matrix",
        {
            "crash_points": len(CRASH_POINTS),
            "repetitions": len(seeds),
            "crashes": len(CRASH_POINTS) * len(seeds),
            "operations": settled.result.operations,
            "calls": sum(settled.result.calls.values()),
            "duplicates_found": settled.result.duplicates,
            "decisions_lost": settled.result.decisions_lost,
            "decisions_changed": settled.result.decisions_changed,
            "violations": len(failures),
            "seconds": round(time.monotonic() - started, 1),
            **cluster.audit.figures(),
        },
    )
    assert not failures, "\n".join(failures)
