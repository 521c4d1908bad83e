"""``decisionflow-orchestrator reroute-reviews`` run as an operator runs it, beside a serving orchestrator, on
SQLite and PostgreSQL: reviews started under the default rule move to the rule the file now gives their
action (a dry run first, changing nothing), after which one approval no longer decides them; a review with a
vote keeps its rule; running it again finds nothing to do; every move is a reroute leaf and the whole log
still reads as the auditor's history; a file with a problem, or none, changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from decisionflow.review_rules import ReviewRule, Stage, rule_digest
from decisionflow.v1 import common_pb2
from decisionflow.vocabulary import Role
from decisionflow_server.storage import db
from orchestrator.schema import proposals
from orchestrator.store import OrchestratorStore
from tests.support.audit import audited
from tests.support.rules_desk import TWO_STAGES, Desk, open_desk, write_rules
from tests.support.stack import count

ACTION = "record_support_review"
PEOPLE = {
    "ava": ([Role.AUTHOR], []),
    "lee": ([Role.REVIEWER], ["support-leads"]),
    "lou": ([Role.REVIEWER], ["support-leads"]),
    "fay": ([Role.REVIEWER], ["finance"]),
}
# The desk starts with a file that gives the action no rule of its own: every review follows the default rule.
NO_RULE = "version = 1\n"
FINANCE_ONLY = """\
version = 1

[[actions.record_support_review.stages]]
name = "finance"
groups = ["finance"]
"""
TWO_STAGES_RULE = ReviewRule(ACTION, (Stage("leads", ("support-leads",), 2), Stage("finance", ("finance",))))


@pytest.fixture
def desk(database_url: str, tmp_path: Path) -> Iterator[Desk]:
    """A stack on a fresh orchestrator database of each kind, serving a file with no rule for the action."""
    with open_desk(tmp_path, PEOPLE, NO_RULE, orchestrator_url=database_url) as opened:
        yield opened


def reroute(desk: Desk, *args: str, rules: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``decisionflow-orchestrator reroute-reviews`` from this environment's scripts, as an operator would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    env["DECISIONFLOW_ORCHESTRATOR_DATABASE_URL"] = desk.stack.orchestrator_url
    rules_args = [] if rules is None else ["--review-rules-file", str(rules)]
    program = str(Path(sys.executable).parent / "decisionflow-orchestrator")
    return subprocess.run(
        [program, "reroute-reviews", "--action", ACTION, *rules_args, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def digests(desk: Desk) -> dict[str, str | None]:
    """Each proposal's rule digest (None: the default rule)."""
    engine = db.create_engine(desk.stack.orchestrator_url, pool_size=1)
    try:
        with engine.connect() as conn:
            return {r.operation_id: r.rule_digest for r in conn.execute(sa.select(proposals))}
    finally:
        engine.dispose()


def the_log_holds(desk: Desk) -> dict[str, int]:
    """Read every audit entry as the auditor's history does; the count of each kind."""
    engine = db.create_engine(desk.stack.orchestrator_url, pool_size=1)
    try:
        return audited(OrchestratorStore(engine)).kinds
    finally:
        engine.dispose()


def test_reviews_move_to_the_rule_in_force_and_one_approval_no_longer_decides_them(desk: Desk, tmp_path: Path) -> None:
    ops = sorted(desk.start(case) for case in ("T-1", "T-2", "T-3"))
    rules = write_rules(tmp_path, TWO_STAGES)

    dry = report(reroute(desk, "--dry-run", rules=rules))
    assert dry == {
        "command": "reroute-reviews",
        "dry_run": True,
        "action": ACTION,
        "rule_digest": rule_digest(TWO_STAGES_RULE),
        "rerouted": ops,
        "kept": [],
    }
    assert set(digests(desk).values()) == {None} and the_log_holds(desk) == {"proposal": 3}

    done = reroute(desk, rules=rules)
    assert report(done)["rerouted"] == ops
    assert f"re-routed 3 pending reviews of {ACTION} to rule {rule_digest(TWO_STAGES_RULE)}" in done.stderr
    assert digests(desk) == dict.fromkeys(ops, rule_digest(TWO_STAGES_RULE))
    assert the_log_holds(desk) == {"proposal": 3, "reroute": 3}

    # The serving orchestrator decides them by the rule now: one lead's approval waits for the next.
    first = desk.approve("lee", ops[0])
    assert first.outcome == common_pb2.OUTCOME_AWAITING_APPROVALS
    assert (list(first.operation.progress.approvals_given), first.operation.progress.approvals_needed) == (["lee"], 2)
    assert desk.stack.effects() == 0

    # Again, to a rule of finance alone: the review with a vote keeps its rule, the others move.
    finance = write_rules(tmp_path, FINANCE_ONLY)
    again = report(reroute(desk, rules=finance))
    assert again["rerouted"] == ops[1:] and again["kept"] == [{"operation_id": ops[0], "why": "kept_votes_cast"}]
    assert report(reroute(desk, rules=finance))["rerouted"] == []

    assert desk.approve("fay", ops[1]).outcome == common_pb2.OUTCOME_COMMITTED
    assert desk.approve("lou", ops[0]).outcome == common_pb2.OUTCOME_AWAITING_APPROVALS
    assert desk.approve("fay", ops[0]).outcome == common_pb2.OUTCOME_COMMITTED
    assert desk.stack.effects() == 2
    assert the_log_holds(desk) == {"proposal": 3, "reroute": 5, "vote": 4, "decision": 2, "effect": 2}


def test_a_file_with_a_problem_or_none_changes_nothing(desk: Desk, tmp_path: Path) -> None:
    op = desk.start("T-1")
    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\n\n[[actions.record_support_review.stages]]\nname = "leads"\napprovals = 0\n')
    refused = reroute(desk, rules=bad)
    assert refused.returncode == 2 and f"{bad}:5" in refused.stderr, refused.stderr
    missing = reroute(desk)
    assert missing.returncode == 2 and "review_rules_file" in missing.stderr.replace("-", "_"), missing.stderr
    assert digests(desk) == {op: None}
    assert count(desk.stack.orchestrator_url, "SELECT count(*) FROM audit_entries") == 1
