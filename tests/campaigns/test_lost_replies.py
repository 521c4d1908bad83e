"""Lost replies and deadlines, injected by the receiver's fault interceptor at 20 % of its answers.

The receiver runs with ``DECISIONFLOW_RECEIVER_FAULTS=lose_reply=0.1,delay=0.1,seed=S``: after
an Apply commits, one answer in ten is replaced by UNAVAILABLE and one in ten is held past the
caller's deadline. Concurrent reviewers start and decide ``--campaign-ops`` operations (most
approved, some declined); some reviewers are impatient (a short deadline, no retries), so the
orchestrator's own retries cannot always absorb a fault and the outcome is Unknown; like a
tenacity loop, some of them then retry. Then the faults stop (the receiver restarts without
them), one reconciler pass runs, and: Unknown = 0, the effects are exactly the distinct approved
operations, and the history holds.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from decisionflow.client import ApproveResult, Decision, Outcome, ReviewClient
from decisionflow.retry import NO_RETRY
from tests.campaigns.cluster import Cluster
from tests.campaigns.history import History, load
from tests.campaigns.report import publish, replay_hint
from tests.campaigns.workload import CAMPAIGN_POLICY, Reviewer, channel, settle_and_check
from tests.support.campaigns import CampaignOptions

FAULTS_ENV = "DECISIONFLOW_RECEIVER_FAULTS"
LOSE_REPLY, DELAY = 0.1, 0.1
CONCURRENCY = 8
DECLINED_SHARE = 0.1
IMPATIENT_SHARE = 0.3
RETRY_UNKNOWN_SHARE = 0.5
PATIENT_SECONDS, IMPATIENT_SECONDS = 1.5, 0.35


def _log_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _operation(reviewers: tuple[Reviewer, Reviewer], seed: int, i: int) -> tuple[Decision, str]:
    """Start and decide one operation; return the decision asked for and how the last call ended."""
    rng = random.Random(f"{seed}:{i}")
    case = f"L{seed}-{i}"
    decision = Decision.DECLINE if rng.random() < DECLINED_SHARE else Decision.APPROVE
    patient, impatient = reviewers
    reviewer = impatient if rng.random() < IMPATIENT_SHARE else patient
    op = patient.start(case) or patient.start(case)
    if op is None:
        return decision, "start_failed"
    answer = reviewer.decide(case, op, decision)
    unknown = not isinstance(answer, ApproveResult) or answer.outcome is Outcome.UNKNOWN
    if unknown and rng.random() < RETRY_UNKNOWN_SHARE:
        # A retry loop around an indeterminate answer: the same operation id, so a replay.
        answer = reviewer.decide(case, op, decision)
        return decision, "retried_" + (answer.outcome.value if isinstance(answer, ApproveResult) else "error")
    return decision, "unknown" if unknown else "settled"


@pytest.mark.campaign
@pytest.mark.slow
def test_lost_replies_and_deadlines_at_twenty_percent(
    campaign: CampaignOptions,
    make_cluster: Callable[..., Cluster],
    history: History,
    request: pytest.FixtureRequest,
) -> None:
    """Under 20 % faults every operation settles after one pass, with one effect per approved operation."""
    seed = campaign.base_seed
    # Short attempts (each one's whole budget) so a held answer costs a fraction of the Approve
    # deadline, as in production.
    cluster = make_cluster(receiver_timeout_seconds=0.2)
    cluster.receiver.env[FAULTS_ENV] = f"lose_reply={LOSE_REPLY},delay={DELAY},seed={seed}"
    cluster.start()
    channels: list[grpc.Channel] = [channel(cluster.orchestrators[0].target) for _ in range(CONCURRENCY)]
    reviewers = [
        (
            Reviewer(f"reviewer{i}", ReviewClient(ch, timeout=PATIENT_SECONDS, policy=CAMPAIGN_POLICY), history),
            Reviewer(f"impatient{i}", ReviewClient(ch, timeout=IMPATIENT_SECONDS, policy=NO_RETRY), history),
        )
        for i, ch in enumerate(channels)
    ]
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            endings = list(
                pool.map(lambda i: _operation(reviewers[i % CONCURRENCY], seed, i), range(campaign.operations))
            )
    finally:
        for ch in channels:
            ch.close()
    faulty_log = _log_lines(cluster.receiver.child.stderr() if cluster.receiver.child else "")
    # Faults stop: the receiver restarts on its port without them.
    cluster.receiver.kill()
    del cluster.receiver.env[FAULTS_ENV]
    cluster.receiver.start()
    settled = settle_and_check(cluster, history)

    injected = Counter(
        str(e.get("outcome")) for e in faulty_log if str(e.get("message", "")).startswith("fault injected")
    )
    # Applies the receiver's servicer answered (a faulted one too: its reply was lost or held after
    # the effect was written), read from their access lines.
    applies = sum(
        1
        for e in faulty_log
        if e.get("logger") == "decisionflow.access"
        and e.get("rpc") == "/decisionflow.v1.EffectReceiverService/Apply"
        and e.get("outcome") in ("CREATED", "REPLAYED")
    )
    approved = {op for op, d in settled.observed.decisions().items() if d is Decision.APPROVE}
    stored = {e.operation_id for e in settled.observed.effects}
    ended = Counter(how for _, how in endings)
    unknown_told = sum(1 for e in load(history.path) if e.call == "approve" and e.outcome == Outcome.UNKNOWN.value)
    publish(
        "lost_replies",
        {
            "operations": campaign.operations,
            "fault_rate": round(LOSE_REPLY + DELAY, 3),
            "apply_calls": applies,
            "faults_injected": sum(injected.values()),
            "lost_replies": injected.get("lose_reply", 0),
            "deadlines": injected.get("delay", 0),
            "unknown_outcomes_told": unknown_told,
            "indeterminate_answers": sum(v for k, v in ended.items() if k != "settled"),
            "client_retries": sum(v for k, v in ended.items() if k.startswith("retried")),
            "approved": len(approved),
            "effects": len(settled.observed.effects),
            "duplicates_found": settled.result.duplicates,
            "decisions_lost": settled.result.decisions_lost,
            "unknown_left": settled.run.summary.get("still_unknown"),
            "seconds": round(time.monotonic() - started, 1),
            **cluster.audit.figures(),
        },
    )
    hint = replay_hint(request.node.nodeid, seed)
    assert not settled.failures(), "\n".join(settled.failures()[:30]) + "\n" + hint
    assert stored == approved, f"effects {len(stored)} != approved operations {len(approved)}\n{hint}"
    assert len(settled.observed.effects) == len(stored), hint
    # The faults really were injected, at the configured rate (within four standard deviations).
    rate = LOSE_REPLY + DELAY
    assert applies > 0, hint
    tolerance = 4 * math.sqrt(rate * (1 - rate) / applies)
    assert abs(sum(injected.values()) / applies - rate) <= tolerance, (injected, applies, hint)
    assert ended["start_failed"] == 0, (ended, hint)
