"""What review rules cost a review: the orchestrator's CPU per call under the default rule against the release
before review rules, and per vote under a rule of two stages, measured in alternating rounds in one run.

First, the default rule (one stage, one approval). Two orchestrators run side by side against one receiver,
each on its own fresh database: "base", the release before review rules (the parent of the commit that added
``orchestrator/migrations/versions/0008_review_rules.py``, extracted from this checkout's git history by
``decisionflow_demo.releases`` and put first on the process's import path), and "branch", this tree with no
rules file. Both run without authentication and without the sequencer in the server
(``--audit-interval-seconds 0``: it works off the request path). Each round drives StartReviews and then their
first Approves at 16 in flight through one and then the other (the order alternates between rounds, so a drift
in the machine's load falls on both), and reads each orchestrator's CPU to the nanosecond (``bench._cpu``). The
report is the CPU per call of each, summed over the rounds, (branch - base) / base, and that share's median over
the rounds.

Then a rule of two stages (two approvals of support-leads, then one of finance): this tree's orchestrator with
authentication (a credentials file whose reviewers hold groups) and that rules file, beside the same server
with authentication and no rules file, again on fresh databases in alternating rounds. Each review of the rule
takes its StartReview and three votes (the first counts, the second completes the leads' stage and advances the
review, the third completes it); each review of the default rule takes its StartReview and one Approve. The
report is the CPU per call of each, per whole review, and the whole review's ratio to the default rule's.

    python -m bench.rules_cost [--quick] [--postgres-url URL] [--rounds N] [--calls N]

Prints figures and asserts nothing: ``tests/bench/test_rules_cost.py`` only checks that it runs and prints them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from bench import _calls, _workload
from bench._cpu import CpuMeter
from bench._databases import Databases, fresh_databases
from bench._load import Call, Sample, drive
from bench._processes import CHECKPOINT_KEY, ServerProcess
from decisionflow.bearer import bearer_metadata
from decisionflow.v1 import common_pb2, review_pb2
from decisionflow.vocabulary import Role
from decisionflow_demo.launch import (
    CHECKPOINT_KEYS_ENV,
    ORCHESTRATOR_MODULE,
    UNLIMITED_AUTHORS,
    ProcessStack,
    orchestrator_args,
)
from decisionflow_demo.releases import RULES_MIGRATION, ReleaseNotInHistory, extract_release, release_before
from decisionflow_server.foundation.processes import launch
from decisionflow_server.runtime.auth import issue_token
from decisionflow_server.storage import db
from orchestrator.store import VERSION_TABLE

IN_FLIGHT = 16
WARMUP_CALLS = 32
BASE, BRANCH = "base", "branch"
DEFAULT_RULE, TWO_STAGES = "default rule", "two stages"
START, FIRST_APPROVE = "StartReview", "first Approve"
VOTES = ("vote 1 (counts)", "vote 2 (advances)", "vote 3 (completes)")
BOTH = (START, FIRST_APPROVE)
MEASURES = {BASE: BOTH, BRANCH: BOTH, DEFAULT_RULE: BOTH, TWO_STAGES: (START, *VOTES)}
# No sequencer in the servers: its work is off the request path.
SERVER_ARGS = (*UNLIMITED_AUTHORS, "--audit-interval-seconds", "0")
RULES = """\
version = 1

[[actions.record_support_review.stages]]
name = "leads"
groups = ["support-leads"]
approvals = 2

[[actions.record_support_review.stages]]
name = "finance"
groups = ["finance"]
"""
# Each person: their roles and groups. rita approves under the default rule; lee, lin and fin vote in turn
# under the two stages.
PEOPLE = {
    "ava": ([Role.AUTHOR], []),
    "rita": ([Role.REVIEWER], []),
    "lee": ([Role.REVIEWER], ["support-leads"]),
    "lin": ([Role.REVIEWER], ["support-leads"]),
    "fin": ([Role.REVIEWER], ["finance"]),
}
# Who casts each vote of a review, and the outcome it must answer.
BALLOTS = {
    BASE: (("", common_pb2.OUTCOME_COMMITTED),),
    BRANCH: (("", common_pb2.OUTCOME_COMMITTED),),
    DEFAULT_RULE: (("rita", common_pb2.OUTCOME_COMMITTED),),
    TWO_STAGES: (
        ("lee", common_pb2.OUTCOME_AWAITING_APPROVALS),
        ("lin", common_pb2.OUTCOME_AWAITING_APPROVALS),
        ("fin", common_pb2.OUTCOME_COMMITTED),
    ),
}


@dataclass
class Tally:
    """One orchestrator's CPU seconds and completed calls per measure, summed over the rounds."""

    measures: tuple[str, ...]
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    failures: int = 0
    first_failure: str = ""
    # Each round's CPU milliseconds per call, per measure, in round order.
    per_round: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for measure in self.measures:
            self.cpu_seconds.setdefault(measure, 0.0)
            self.calls.setdefault(measure, 0)
            self.per_round.setdefault(measure, [])

    def ms_per_call(self, measure: str) -> float:
        """CPU milliseconds per completed call of measure."""
        calls = self.calls[measure]
        return 1000 * self.cpu_seconds[measure] / calls if calls else 0.0

    def review_ms(self) -> float:
        """CPU milliseconds of a whole review: a call of every measure."""
        return sum(self.ms_per_call(measure) for measure in self.measures)

    def review_per_round(self) -> list[float]:
        """Each round's CPU milliseconds of a whole review."""
        return [sum(values) for values in zip(*(self.per_round[m] for m in self.measures), strict=True)]

    def add(self, measure: str, seconds: float, sample: Sample) -> None:
        """Record one round's CPU seconds and sample of measure."""
        self.cpu_seconds[measure] += seconds
        self.calls[measure] += sample.calls
        self.per_round[measure].append(1000 * seconds / sample.calls if sample.calls else 0.0)
        self.failures += sample.failures
        self.first_failure = self.first_failure or sample.first_failure


def _progress(message: str) -> None:
    sys.stderr.write(f"rules-cost: {message}\n")
    sys.stderr.flush()


class Reviews:
    """Reviews through one orchestrator: StartReviews and votes as the people of its tokens (none: no
    authentication), each answer checked."""

    def __init__(self, clients: _calls.Clients, tokens: dict[str, str]) -> None:
        self.clients = clients
        self.tokens = tokens

    def _metadata(self, who: str) -> tuple[tuple[str, str], ...] | None:
        return bearer_metadata(self.tokens[who]) if who else None

    async def start(self, tags: Sequence[str]) -> tuple[Sample, list[str]]:
        """StartReview of a fresh case per tag as the author; the sample and the operation ids."""
        operation_ids = [""] * len(tags)
        metadata = self._metadata("ava" if self.tokens else "")

        def one(index: int) -> Call:
            request = _workload.start_review_request(tags[index])

            async def call() -> None:
                answer = await self.clients.review.StartReview(
                    request, timeout=_calls.CALL_TIMEOUT_SECONDS, metadata=metadata
                )
                if not answer.created:
                    raise _calls.UnexpectedAnswer(f"StartReview {tags[index]}: created=false")
                operation_ids[index] = answer.proposal.operation_id

            return call

        return await drive([one(i) for i in range(len(tags))], IN_FLIGHT), operation_ids

    async def vote(self, operation_ids: Sequence[str], who: str, outcome: int) -> Sample:
        """Approve each operation as who; each answer must be outcome, not a replay."""
        metadata = self._metadata(who)

        def one(operation_id: str) -> Call:
            request = review_pb2.ApproveRequest(operation_id=operation_id, decision=common_pb2.DECISION_APPROVE)

            async def call() -> None:
                answer = await self.clients.review.Approve(
                    request, timeout=_calls.CALL_TIMEOUT_SECONDS, metadata=metadata
                )
                if answer.outcome != outcome or answer.replay:
                    raise _calls.UnexpectedAnswer(
                        f"Approve {operation_id} as {who or 'anyone'}: outcome {answer.outcome}, replay {answer.replay}"
                    )

            return call

        return await drive([one(op) for op in operation_ids if op], IN_FLIGHT)


async def _round(
    reviews: Reviews, meter: CpuMeter, tally: Tally, ballots: tuple[tuple[str, int], ...], calls: int, tag: str
) -> None:
    tags = [f"{tag}-{i:05d}" for i in range(calls)]
    before = meter.snapshot()["orchestrator"]
    sample, operation_ids = await reviews.start(tags)
    after = meter.snapshot()["orchestrator"]
    tally.add(START, after - before, sample)
    for measure, (who, outcome) in zip(tally.measures[1:], ballots, strict=True):
        before = after
        sample = await reviews.vote(operation_ids, who, outcome)
        after = meter.snapshot()["orchestrator"]
        tally.add(measure, after - before, sample)


async def _measure(
    orchestrators: dict[str, ServerProcess], receiver: ServerProcess, tokens: dict[str, str], rounds: int, calls: int
) -> dict[str, Tally]:
    """Alternating rounds of reviews through each orchestrator (a warm-up first, not measured)."""
    clients = {name: _calls.Clients(o.target, receiver.target, receiver.target) for name, o in orchestrators.items()}
    reviews = {name: Reviews(client, tokens) for name, client in clients.items()}
    meters = {name: CpuMeter({"orchestrator": o.pid}) for name, o in orchestrators.items()}
    tallies = {name: Tally(MEASURES[name]) for name in orchestrators}
    # Tags are unique per run and orchestrator: every orchestrator applies its effects at the one receiver.
    run_id = uuid.uuid4().hex[:8]
    slot = {name: index for index, name in enumerate(orchestrators)}
    try:
        for name in orchestrators:
            _progress(f"warming up the orchestrator {name} ({WARMUP_CALLS} reviews, not measured)")
            warm = Tally(MEASURES[name])
            await _round(reviews[name], meters[name], warm, BALLOTS[name], WARMUP_CALLS, f"{run_id}-w{slot[name]}")
            if warm.failures:
                raise SystemExit(f"rules-cost: the orchestrator {name} failed a warm-up call: {warm.first_failure}")
        for number in range(1, rounds + 1):
            order = list(orchestrators) if number % 2 else list(reversed(orchestrators))
            for name in order:
                _progress(f"round {number}/{rounds}: {calls} reviews through the orchestrator {name}")
                tag = f"{run_id}-r{number}-{slot[name]}"
                await _round(reviews[name], meters[name], tallies[name], BALLOTS[name], calls, tag)
    finally:
        for client in clients.values():
            await client.close()
    return tallies


def _spread(values: list[float], percent: bool = True) -> str:
    # CPU is read to the nanosecond (bench._cpu); only where the process's CPU clock cannot be read does it
    # come in clock ticks (10 ms), and then a round of a few calls can read as no CPU, with nothing to divide.
    if not values:
        return "none: no round measured the orchestrator's CPU (read in clock ticks here)"
    quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    scale, unit = (100, "%") if percent else (1, "")
    return (
        f"{scale * statistics.median(values):+.1f}{unit} "
        f"[{scale * quartiles[0]:+.1f}{unit}, {scale * quartiles[2]:+.1f}{unit}]"
    )


def _relative(numerators: list[float], denominators: list[float]) -> list[float]:
    # Each round's (numerator - denominator) / denominator, from the two orchestrators' runs in that round.
    return [(n - d) / d for n, d in zip(numerators, denominators, strict=True) if d]


def render_default(tallies: dict[str, Tally], database: str, rounds: int, calls: int) -> str:
    """The default rule's table: CPU per call of the release before review rules and of this tree, the
    difference, its share of the base and the median and quartiles of each round's share."""
    lines = [
        f"review rules' cost under the default rule ({database}, {rounds} alternating rounds of {calls} reviews each "
        f"at {IN_FLIGHT} in flight; orchestrator CPU per call)",
        f"  {'':<22}{BASE:>12}{BRANCH:>12}{'difference':>12}{'share':>8}   per-round share: median [quartiles]",
    ]
    base, branch = tallies[BASE], tallies[BRANCH]
    rows = [
        (m, base.ms_per_call(m), branch.ms_per_call(m), base.per_round[m], branch.per_round[m]) for m in MEASURES[BASE]
    ]
    rows.append(
        (
            "StartReview + Approve",
            base.review_ms(),
            branch.review_ms(),
            base.review_per_round(),
            branch.review_per_round(),
        )
    )
    for measure, was, now, was_rounds, now_rounds in rows:
        share = (now - was) / was if was else 0.0
        lines.append(
            f"  {measure:<22}{was:>9.3f} ms{now:>9.3f} ms{1000 * (now - was):>+9.0f} µs{100 * share:>+7.1f}%   "
            f"{_spread(_relative(now_rounds, was_rounds))}"
        )
    lines.append(f"  failed calls: {base.failures + branch.failures}")
    return "\n".join(lines)


def render_stages(tallies: dict[str, Tally], database: str, rounds: int, calls: int) -> str:
    """The two-stage rule's table: CPU per call and per whole review, against the default rule's StartReview and
    first Approve, both with authentication; the whole review's ratio and each round's."""
    default, staged = tallies[DEFAULT_RULE], tallies[TWO_STAGES]
    lines = [
        f"a rule of two stages (two approvals of support-leads, then one of finance) against the default rule, both "
        f"with authentication ({database}, {rounds} alternating rounds of {calls} reviews each at {IN_FLIGHT} in "
        "flight; orchestrator CPU per call)",
        f"  {'':<22}{DEFAULT_RULE:>14}{TWO_STAGES:>14}",
        f"  {START:<22}{default.ms_per_call(START):>11.3f} ms{staged.ms_per_call(START):>11.3f} ms",
    ]
    approve = default.ms_per_call(FIRST_APPROVE)
    for index, vote in enumerate(VOTES):
        was = f"{approve:>11.3f} ms" if index == 0 else f"{'':>14}"
        lines.append(f"  {vote:<22}{was}{staged.ms_per_call(vote):>11.3f} ms")
    whole, staged_whole = default.review_ms(), staged.review_ms()
    extra = _relative(staged.review_per_round(), default.review_per_round())
    lines.append(
        f"  {'whole review':<22}{whole:>11.3f} ms{staged_whole:>11.3f} ms   "
        f"{staged_whole / whole if whole else 0.0:.2f}x the default rule; per-round excess: median [quartiles] "
        f"{_spread(extra)}"
    )
    lines.append(f"  failed calls: {default.failures + staged.failures}")
    return "\n".join(lines)


def _start_base(work: Path, commit: str, databases: Databases, receiver: ServerProcess) -> ServerProcess:
    """The release at commit, from git history, on its own database, calling receiver."""
    release = extract_release(commit, work / "base-release")
    service = launch(
        ORCHESTRATOR_MODULE,
        orchestrator_args(databases.orchestrator_url, receiver.target, extra=SERVER_ARGS),
        work,
        "orchestrator-base",
        env={CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY, "PYTHONPATH": str(release)},
        cwd=release,
    )
    service.wait_ready(60)
    return service


def _revision(url: str) -> str:
    # Which schema each orchestrator ran on: the base's must be the one before review rules.
    engine = db.create_engine(url)
    try:
        with engine.connect() as conn:
            return db.current_revision(conn, VERSION_TABLE) or "none"
    finally:
        engine.dispose()


def _report_failures(tallies: dict[str, Tally]) -> None:
    for name, tally in tallies.items():
        if tally.first_failure:
            _progress(f"the orchestrator {name}'s first failed call: {tally.first_failure}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run both measurements once and print their tables."""
    cli = argparse.ArgumentParser(prog="python -m bench.rules_cost", description=__doc__.split("\n\n")[0])
    cli.add_argument("--quick", action="store_true", help="2 rounds of 48 reviews (default: 16 rounds of 200)")
    cli.add_argument("--postgres-url", help="run on fresh PostgreSQL databases made next to this one")
    cli.add_argument("--rounds", type=int, help="alternating rounds")
    cli.add_argument("--calls", type=int, help="reviews per round per orchestrator")
    ns = cli.parse_args(argv)
    rounds = max(1, ns.rounds if ns.rounds is not None else (2 if ns.quick else 16))
    calls = max(1, ns.calls if ns.calls is not None else (48 if ns.quick else 200))
    try:
        commit = release_before(RULES_MIGRATION)
    except ReleaseNotInHistory as missing:
        _progress(f"no base to measure against: {missing}")
        return 2
    failed = 0
    with tempfile.TemporaryDirectory(prefix="decisionflow-rules-cost-") as scratch, ExitStack() as stack:
        work = Path(scratch)
        databases: dict[str, Databases] = {}
        for name in (BASE, BRANCH, DEFAULT_RULE, TWO_STAGES):
            (where := work / name.replace(" ", "-")).mkdir()
            databases[name] = stack.enter_context(fresh_databases(where, ns.postgres_url))
        kind = databases[BRANCH].kind
        processes = ProcessStack(
            work, databases[BRANCH].receiver_url, databases[BRANCH].orchestrator_url, CHECKPOINT_KEY
        )
        stack.callback(processes.close)
        _progress(
            f"starting a receiver, this tree's orchestrator and the release before review rules ({kind}) in {work}"
        )
        receiver = processes.start_receiver("receiver")
        base = _start_base(work, commit, databases[BASE], receiver)
        stack.callback(base.stop)
        branch = processes.start_orchestrator("orchestrator-branch", args=SERVER_ARGS)
        tallies = asyncio.run(_measure({BASE: base, BRANCH: branch}, receiver, {}, rounds, calls))
        print(render_default(tallies, kind, rounds, calls))
        revisions = {name: _revision(databases[name].orchestrator_url) for name in (BASE, BRANCH)}
        print(
            f"  {BASE}: the release at {commit[:12]} (orchestrator schema {revisions[BASE]}); "
            f"{BRANCH}: this tree, no rules file (schema {revisions[BRANCH]})",
            flush=True,
        )
        _report_failures(tallies)
        failed += sum(t.failures for t in tallies.values())
        base.stop()
        branch.stop()

        credentials = work / "credentials.json"
        tokens = {name: issue_token(credentials, name, roles, groups) for name, (roles, groups) in PEOPLE.items()}
        (rules := work / "rules.toml").write_text(RULES, encoding="utf-8")
        auth = (*SERVER_ARGS, "--credentials-file", str(credentials))
        _progress("starting this tree's orchestrator with authentication, with the two stages and without rules")
        staged = {
            DEFAULT_RULE: processes.start_orchestrator(
                "orchestrator-default-rule", database_url=databases[DEFAULT_RULE].orchestrator_url, args=auth
            ),
            TWO_STAGES: processes.start_orchestrator(
                "orchestrator-two-stages",
                database_url=databases[TWO_STAGES].orchestrator_url,
                args=(*auth, "--review-rules-file", str(rules)),
            ),
        }
        tallies = asyncio.run(_measure(staged, receiver, tokens, rounds, calls))
        print(render_stages(tallies, kind, rounds, calls), flush=True)
        _report_failures(tallies)
        failed += sum(t.failures for t in tallies.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
