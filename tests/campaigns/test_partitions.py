"""Network partitions between the orchestrator and the receiver, in real network namespaces.

The receiver runs in one namespace, the orchestrator in another (TLS and tokens: both listen
beyond loopback); the reviewers, the checks and the reconciler sit in the root namespace, which
has its own link to each. ``--partition-ops`` reviews are started, then approved by 8 reviewers;
once a quarter of the approvals have answered, the orchestrator-receiver link is cut (requests
only, replies only, or both) for a few seconds while the rest are in flight, then healed. A
degraded link drops 10 % of the packets each way and delays the rest 200 ms (tc netem, or an
NFQUEUE delayer where the kernel has no netem) for a whole batch. After healing, as a caller's
retry loop would, every other indeterminate approval is approved again: a replay, so the
orchestrator sends Apply again and the receiver must deduplicate it. Then ONE reconciler pass,
and: 0 duplicates, no decision lost or changed, every Unknown settled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from decisionflow.channels import open_channel
from decisionflow.client import ApproveResult, Decision, DecisionflowError, Outcome, ReviewClient
from decisionflow.retry import NO_RETRY
from decisionflow_server.runtime.auth import Role
from tests.campaigns.cluster import Cluster
from tests.campaigns.history import History, load
from tests.campaigns.netns import Direction, Topology, topology
from tests.campaigns.report import publish
from tests.campaigns.workload import CAMPAIGN_POLICY, CHANNEL_OPTIONS, Reviewer, Settled, settle_and_check
from tests.support.campaigns import CampaignOptions
from tests.support.secure import NetworkSecurity, write_network_security

CONCURRENCY = 8
RECEIVER_TIMEOUT_SECONDS = 1.0
# The Approve deadline: the orchestrator's Apply retries run inside it and inside its attempt
# budget (RECEIVER_TIMEOUT_SECONDS), whichever ends first, then it answers Unknown.
APPROVE_TIMEOUT_SECONDS = 3.0
CUT_SECONDS = 5.0
LOSS, DELAY_MS = 0.1, 200
# On the degraded link an Apply takes a round trip of 400 ms: an attempt of 0.5 s times out on any
# retransmission, so the Approve answers Unknown while its Apply may have committed, and its replay
# or the reconciler sends Apply again.
DEGRADED_ATTEMPT_SECONDS = 0.5
CANARY_TRIES = 10
DELAYER_START_POLLS = 200
PRINCIPALS = {
    "reviewer": frozenset({Role.REVIEWER, Role.AUTHOR}),
    # The checks read both services; the reconciler process presents each service its own token.
    "reconciler": frozenset({Role.OPERATOR, Role.EFFECT_READER}),
    "reconciler-operator": frozenset({Role.OPERATOR}),
    "reconciler-reader": frozenset({Role.EFFECT_READER}),
    "orchestrator": frozenset({Role.EFFECT_WRITER}),
}


@dataclass
class Partitioned:
    """A receiver and an orchestrator in their namespaces, and how the root namespace reaches them."""

    cluster: Cluster
    top: Topology
    security: NetworkSecurity
    history: History

    def connect(self, principal: str) -> Callable[[str], grpc.Channel]:
        """Open TLS channels carrying principal's token."""
        token = self.security.token(principal)
        return lambda target: open_channel(target, ca_file=self.security.ca_file, token=token, options=CHANNEL_OPTIONS)

    def settle(self) -> Settled:
        """One reconciler pass (from the root namespace), then the history and state checks."""
        return settle_and_check(self.cluster, self.history, connect=self.connect("reconciler"))


@contextmanager
def partitioned(
    workdir: Path, history: History, receiver_timeout: float = RECEIVER_TIMEOUT_SECONDS
) -> Iterator[Partitioned]:
    """Start the receiver and the orchestrator in fresh namespaces; kill them and delete the namespaces after."""
    with topology() as top:
        security = write_network_security(
            workdir / "pki",
            {
                "receiver": [top.receiver_address, top.receiver_address_for_orchestrator],
                "orchestrator": [top.orchestrator_address],
            },
            PRINCIPALS,
        )
        cluster = Cluster.create(
            workdir,
            f"sqlite:///{workdir / 'receiver.db'}",
            f"sqlite:///{workdir / 'orchestrator.db'}",
            receiver_timeout_seconds=receiver_timeout,
        )
        receiver, orchestrator = cluster.receiver, cluster.orchestrators[0]
        for server, name, namespace, host in (
            (receiver, "receiver", top.receiver_ns, top.receiver_address),
            (orchestrator, "orchestrator", top.orchestrator_ns, top.orchestrator_address),
        ):
            server.netns, server.bind_host, server.host = namespace, "0.0.0.0", host
            server.argv += security.server_argv(name)
        cluster.reconciler_extra_argv = ["--ca-file", str(security.ca_file)]
        cluster.reconciler_extra_argv += [
            "--orchestrator-token-file",
            str(security.token_file("reconciler-operator")),
            "--receiver-token-file",
            str(security.token_file("reconciler-reader")),
        ]
        try:
            receiver.start()
            orchestrator.argv += [
                "--receiver-target",
                f"{top.receiver_address_for_orchestrator}:{receiver.port}",
                "--receiver-ca-file",
                str(security.ca_file),
                "--receiver-token-file",
                str(security.token_file("orchestrator")),
            ]
            orchestrator.start()
            yield Partitioned(cluster, top, security, history)
        finally:
            cluster.close()


@dataclass
class Team:
    """Reviewers on CONCURRENCY channels: deciders make one attempt (an indeterminate answer stays in the
    history), starters retry (reviews are started before any fault, on links that are just up)."""

    deciders: list[Reviewer]
    starters: list[Reviewer]

    def start_all(self, cases: list[str]) -> list[str]:
        """Start a review of every case; return the operation ids."""
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            ops = list(pool.map(lambda i: self.starters[i % CONCURRENCY].start(cases[i]), range(len(cases))))
        assert all(ops), f"a review did not start before the fault: {[r.last_error for r in self.starters]}"
        return [str(op) for op in ops]


@contextmanager
def reviewers(stack: Partitioned) -> Iterator[Team]:
    """A team of reviewers in the root namespace, dialling the orchestrator's namespace."""
    connect = stack.connect("reviewer")
    channels = [connect(stack.cluster.orchestrators[0].target) for _ in range(CONCURRENCY)]
    try:
        yield Team(
            [
                Reviewer(
                    f"reviewer{i}", ReviewClient(ch, timeout=APPROVE_TIMEOUT_SECONDS, policy=NO_RETRY), stack.history
                )
                for i, ch in enumerate(channels)
            ],
            [
                Reviewer(f"author{i}", ReviewClient(ch, timeout=5, policy=CAMPAIGN_POLICY), stack.history)
                for i, ch in enumerate(channels)
            ],
        )
    finally:
        for ch in channels:
            ch.close()


def _approve_during(
    team: list[Reviewer], cases: list[str], ops: list[str], fault: Callable[[], None]
) -> list[ApproveResult | DecisionflowError]:
    """Approve every op; once a quarter have answered, run fault (which returns after healing)."""
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        futures = [
            pool.submit(team[i % CONCURRENCY].decide, cases[i], ops[i], Decision.APPROVE) for i in range(len(ops))
        ]
        while sum(f.done() for f in futures) < max(1, len(futures) // 4) and not all(f.done() for f in futures):
            time.sleep(0.002)
        fault()
        return [f.result() for f in futures]


def _canary(team: list[Reviewer], prefix: str) -> int:
    """Approve fresh reviews until one commits (the link carries Apply); return the tries.

    Before a fault it opens the orchestrator's connection to the receiver, as in steady state;
    after healing it shows the link works again."""
    for attempt in range(1, CANARY_TRIES + 1):
        case = f"{prefix}-canary{attempt}"
        op = team[0].start(case)
        answer = team[0].decide(case, op, Decision.APPROVE) if op else None
        if isinstance(answer, ApproveResult) and answer.outcome is Outcome.COMMITTED:
            return attempt
    raise AssertionError(f"no approval committed within {CANARY_TRIES} tries after healing")


def _is_indeterminate(answer: ApproveResult | DecisionflowError) -> bool:
    if isinstance(answer, ApproveResult):
        return answer.outcome is Outcome.UNKNOWN
    return not answer.definite


def _indeterminate(answers: list[ApproveResult | DecisionflowError]) -> int:
    return sum(1 for a in answers if _is_indeterminate(a))


def _retry_half(
    team: list[Reviewer], cases: list[str], ops: list[str], answers: list[ApproveResult | DecisionflowError]
) -> int:
    """Like a caller's retry loop, approve again every other indeterminate approval (a replay: the
    orchestrator drives Apply again and the receiver must deduplicate it); the reconciler gets the rest."""
    again = [i for i, a in enumerate(answers) if _is_indeterminate(a)][::2]
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(
            pool.map(
                lambda k: team[k % CONCURRENCY].decide(cases[again[k]], ops[again[k]], Decision.APPROVE),
                range(len(again)),
            )
        )
    return len(again)


def _applies(stack: Partitioned, outcome: str) -> int:
    """Apply calls the receiver logged with this outcome (CREATED, or REPLAYED: a repeat it deduplicated)."""
    child = stack.cluster.receiver.child
    return 0 if child is None else child.stderr().count(f'"outcome": "{outcome}"')


def _report(
    name: str, stack: Partitioned, answers: list[ApproveResult | DecisionflowError], settled: Settled, **more: object
) -> None:
    calls = sum(1 for e in load(stack.history.path) if e.type != "invoke")
    publish(
        f"partition_{name}",
        {
            "calls": calls,
            "faults": sum(1 for f in stack.top.faults if f != "heal"),
            "dropped_packets": stack.top.dropped,
            "unknowns": _indeterminate(answers),
            "unknown_outcomes": sum(
                1 for a in answers if isinstance(a, ApproveResult) and a.outcome is Outcome.UNKNOWN
            ),
            "passes_to_settle": 1 if not settled.failures() else "unsettled",
            "settled_by_pass": settled.run.summary.get("settled"),
            "redriven_by_pass": settled.run.summary.get("redriven"),
            "violations": len(settled.result.violations) + len(settled.states),
            "duplicates_found": settled.result.duplicates,
            "applies_deduplicated": _applies(stack, "REPLAYED"),
            "decisions_lost": settled.result.decisions_lost,
            "decisions_changed": settled.result.decisions_changed,
            **{k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in more.items()},
            **stack.cluster.audit.figures(),
        },
    )


def _delay(stack: Partitioned) -> str:
    """Delay the link DELAY_MS each way: netem where the kernel has it, else NFQUEUE delayers; return which."""
    if stack.top.netem_delay(DELAY_MS):
        return "netem"
    delayers = [
        stack.cluster.launcher.start(
            f"netdelay-{namespace}", "tests.campaigns.netdelay", ["--delay-ms", str(DELAY_MS)], netns=namespace
        )
        for namespace in (stack.top.orchestrator_ns, stack.top.receiver_ns)
    ]
    for delayer in delayers:
        for _ in range(DELAYER_START_POLLS):
            if not delayer.alive or (delayer.stdout_path.exists() and "ready" in delayer.stdout()):
                break
            time.sleep(0.05)
        assert "ready" in delayer.stdout(), f"the delayer did not start: {delayer.stderr()[-2000:]}"
    stack.top.queue(Direction.BOTH)
    return "nfqueue"


def _packets_delayed(stack: Partitioned) -> int | None:
    """Packets the NFQUEUE delayers passed on (None with netem, which does not count them)."""
    counts = [
        int(line.split()[1])
        for child in stack.cluster.launcher.children
        if child.name.startswith("netdelay-")
        for line in child.stdout().splitlines()[-1:]
        if line.startswith("delayed ")
    ]
    return sum(counts) if counts else None


@pytest.mark.campaign
@pytest.mark.slow
@pytest.mark.parametrize("direction", list(Direction), ids=[d.name.lower() for d in Direction])
def test_a_cut_mid_approve_then_healed_settles_in_one_pass(
    direction: Direction, campaign: CampaignOptions, tmp_path: Path, history: History
) -> None:
    """A cut of the orchestrator-receiver link while approvals are in flight loses and doubles nothing."""
    started = time.monotonic()
    n, name = campaign.partition_ops, f"cut_{direction.name.lower()}"
    with partitioned(tmp_path, history) as stack, reviewers(stack) as team:
        cases = [f"P{campaign.base_seed}-{name}-{i}" for i in range(n)]
        ops = team.start_all(cases)
        _canary(team.starters, f"P{campaign.base_seed}-{name}-warm")

        def cut_then_heal() -> None:
            stack.top.cut(direction)
            time.sleep(CUT_SECONDS)
            stack.top.heal()

        answers = _approve_during(team.deciders, cases, ops, cut_then_heal)
        canary_tries = _canary(team.starters, f"P{campaign.base_seed}-{name}")
        retries = _retry_half(team.deciders, cases, ops, answers)
        settled = stack.settle()
    _report(
        name,
        stack,
        answers,
        settled,
        client_retries=retries,
        canary_tries=canary_tries,
        seconds=round(time.monotonic() - started, 1),
    )
    assert not settled.failures(), "\n".join(settled.failures()[:30])
    assert stack.top.dropped > 0, "the cut dropped no packet: the approvals were not in flight"
    approved = {op for op, d in settled.observed.decisions().items() if d is Decision.APPROVE}
    assert {e.operation_id for e in settled.observed.effects} == approved


@pytest.mark.campaign
@pytest.mark.slow
def test_a_degraded_link_settles_in_one_pass(campaign: CampaignOptions, tmp_path: Path, history: History) -> None:
    """With 10 % loss and a 200 ms delay each way, nothing is lost or doubled."""
    started = time.monotonic()
    n, name = campaign.partition_ops, "degraded"
    with partitioned(tmp_path, history, DEGRADED_ATTEMPT_SECONDS) as stack, reviewers(stack) as team:
        cases = [f"P{campaign.base_seed}-{name}-{i}" for i in range(n)]
        ops = team.start_all(cases)
        _canary(team.starters, f"P{campaign.base_seed}-{name}-warm")
        stack.top.lose(LOSS)
        delay = _delay(stack)
        answers = _approve_during(team.deciders, cases, ops, lambda: None)
        stack.top.heal()
        canary_tries = _canary(team.starters, f"P{campaign.base_seed}-{name}")
        retries = _retry_half(team.deciders, cases, ops, answers)
        settled = stack.settle()
    _report(
        name,
        stack,
        answers,
        settled,
        loss=LOSS,
        delay_ms=DELAY_MS,
        delay_by=delay,
        packets_delayed=_packets_delayed(stack),
        client_retries=retries,
        canary_tries=canary_tries,
        seconds=round(time.monotonic() - started, 1),
    )
    assert not settled.failures(), "\n".join(settled.failures()[:30])
    assert stack.top.dropped > 0, "the lossy link dropped no packet"
    approved = {op for op, d in settled.observed.decisions().items() if d is Decision.APPROVE}
    assert {e.operation_id for e in settled.observed.effects} == approved
