"""Races: eight concurrent approvers per review, mixing approve and decline, released together.

On SQLite with one orchestrator process, and on PostgreSQL with two orchestrator processes
sharing the database (the approvers alternate between them). For every review: exactly one
decision is recorded; there is an effect if and only if it is APPROVE; every approver whose
decision matches was told that decision's outcome (one of them first, the rest as replays) and
every other approver got DECISION_CONFLICT naming the recorded decision.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from decisionflow import reasons
from decisionflow.client import Decision, Outcome
from tests.campaigns.cluster import Cluster
from tests.campaigns.history import Event, History, load
from tests.campaigns.report import publish, replay_hint
from tests.campaigns.workload import Reviewer, settle_and_check
from tests.support.campaigns import CampaignOptions

APPROVERS = 8
REVIEWS_AT_ONCE = 3
OUTCOME_OF = {Decision.APPROVE.value: Outcome.COMMITTED.value, Decision.DECLINE.value: Outcome.DECLINED.value}


def _race(reviewers: list[Reviewer], seed: int, i: int) -> None:
    rng = random.Random(f"{seed}:{i}")
    case = f"R{seed}-{i}"
    op = reviewers[0].start(case) or reviewers[0].start(case)
    assert op is not None, f"StartReview failed: {reviewers[0].last_error}"
    decisions = [Decision.APPROVE if rng.random() < 0.5 else Decision.DECLINE for _ in range(APPROVERS)]
    barrier = threading.Barrier(APPROVERS)

    def decide(k: int) -> None:
        barrier.wait()
        reviewers[k].decide(case, op, decisions[k])

    threads = [threading.Thread(target=decide, args=(k,)) for k in range(APPROVERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def race_violations(events: list[Event], recorded: dict[str, Decision]) -> list[str]:
    """Every decision call against the recorded decision: its outcome (one first, the rest replays) or a conflict."""
    calls: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        if event.type != "invoke" and event.call in ("approve", "decline"):
            calls[event.op].append(event)
    problems = []
    for op, answers in sorted(calls.items()):
        decision = recorded.get(op)
        if decision is None:
            problems.append(f"{op}: {len(answers)} decisions sent, none recorded")
            continue
        matching = [a for a in answers if a.call == decision.value.lower()]
        others = [a for a in answers if a.call != decision.value.lower()]
        if len(answers) != APPROVERS:
            problems.append(f"{op}: {len(answers)} answers for {APPROVERS} approvers")
        for a in matching:
            if (
                a.type not in ("ok", "info")
                or a.decision != decision.value
                or a.outcome
                not in (
                    OUTCOME_OF[decision.value],
                    Outcome.UNKNOWN.value,
                )
            ):
                problems.append(f"{op}: a {a.call} got {a.type} {a.outcome} {a.error}; {decision.value} is recorded")
        if matching and sum(1 for a in matching if not a.replay) != 1:
            problems.append(f"{op}: {sum(not a.replay for a in matching)} first answers among {len(matching)}")
        for a in others:
            if a.type != "fail" or a.outcome != reasons.DECISION_CONFLICT or a.decision != decision.value:
                problems.append(f"{op}: a {a.call} got {a.type} {a.outcome} naming {a.decision or 'nothing'}")
    return problems


def _campaign(
    name: str, cluster: Cluster, campaign: CampaignOptions, history: History, request: pytest.FixtureRequest
) -> None:
    cluster.start()
    seed = campaign.base_seed
    connected = [
        Reviewer.connect(f"approver{k}", cluster.orchestrators[k % len(cluster.orchestrators)].target, history)
        for k in range(APPROVERS * REVIEWS_AT_ONCE)
    ]
    channels: list[grpc.Channel] = [ch for _, ch in connected]
    groups = [[r for r, _ in connected[g * APPROVERS : (g + 1) * APPROVERS]] for g in range(REVIEWS_AT_ONCE)]
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(REVIEWS_AT_ONCE) as pool:
            list(pool.map(lambda i: _race(groups[i % REVIEWS_AT_ONCE], seed, i), range(campaign.race_reviews)))
    finally:
        for ch in channels:
            ch.close()
    settled = settle_and_check(cluster, history)
    recorded = settled.observed.decisions()
    problems = race_violations(load(history.path), recorded) + settled.failures()
    approved = sum(1 for d in recorded.values() if d is Decision.APPROVE)
    publish(
        name,
        {
            "reviews": campaign.race_reviews,
            "approvers": APPROVERS,
            "orchestrators": len(cluster.orchestrators),
            "decision_calls": campaign.race_reviews * APPROVERS,
            "approved": approved,
            "declined": len(recorded) - approved,
            "effects": len(settled.observed.effects),
            "duplicates_found": settled.result.duplicates,
            "decisions_lost": settled.result.decisions_lost,
            "violations": len(problems),
            "seconds": round(time.monotonic() - started, 1),
            **cluster.audit.figures(),
        },
    )
    assert not problems, "\n".join(problems[:30]) + "\n" + replay_hint(request.node.nodeid, seed)
    assert len(recorded) == campaign.race_reviews


@pytest.mark.campaign
@pytest.mark.slow
def test_races_sqlite_one_orchestrator(
    campaign: CampaignOptions,
    make_cluster: Callable[..., Cluster],
    history: History,
    request: pytest.FixtureRequest,
) -> None:
    """--race-reviews reviews by 8 approvers on SQLite: one decision each, effect iff approved."""
    _campaign("races_sqlite", make_cluster(), campaign, history, request)


@pytest.mark.campaign
@pytest.mark.slow
@pytest.mark.postgres
def test_races_postgres_two_orchestrators(
    campaign: CampaignOptions,
    make_cluster: Callable[..., Cluster],
    history: History,
    request: pytest.FixtureRequest,
    postgres_url: str,
) -> None:
    """The same races on PostgreSQL, the approvers spread over two orchestrator processes."""
    _campaign("races_postgres", make_cluster(postgres_url, orchestrators=2), campaign, history, request)
