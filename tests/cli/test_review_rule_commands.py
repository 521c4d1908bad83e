"""The review commands, each run as its own process, against a real orchestrator started with a rules file (two
of the leads, then one of finance): a vote that counts prints where the review stands and exits 0, status and
show carry the stage, approvals and who may decide, and a vote the rule does not count is refused exit 3 with
its declared advice."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from decisionflow_server.runtime.auth import Role
from tests.support.review_cli import proposal_file
from tests.support.rules_desk import TWO_STAGES, open_desk, with_deadline
from tests.support.stack import Stack

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

RULES = with_deadline(TWO_STAGES, "3d")
PEOPLE = {
    "ava": ([Role.AUTHOR], []),
    "lena": ([Role.REVIEWER], ["support-leads"]),
    "lou": ([Role.REVIEWER], ["support-leads"]),
    "fay": ([Role.REVIEWER], ["finance"]),
    "oli": ([Role.REVIEWER], []),
}


@dataclass
class Done:
    """One finished command: exit status, stdout's JSON object, stderr."""

    exit_code: int
    document: dict[str, object]
    stderr: str


@dataclass
class Desk:
    """A stack serving RULES and a token file per person."""

    stack: Stack
    tokens: dict[str, Path]

    def __call__(self, *args: str, who: str) -> Done:
        """Run ``decisionflow ARGS`` as who in a separate process."""
        target = f"127.0.0.1:{self.stack.orchestrator_port}"
        argv = [sys.executable, "-m", "decisionflow_cli", *args, "--target", target]
        done = subprocess.run(
            [*argv, "--token-file", str(self.tokens[who])], capture_output=True, text=True, timeout=60, check=False
        )
        lines = done.stdout.strip().splitlines()
        assert len(lines) == 1, done
        return Done(done.returncode, json.loads(lines[0]), done.stderr)


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    """An orchestrator started with RULES, authentication on, and a token per person."""
    with open_desk(tmp_path, PEOPLE, RULES) as opened:
        tokens: dict[str, Path] = {}
        for name, token in opened.tokens.items():
            tokens[name] = tmp_path / f"{name}.token"
            tokens[name].write_text(token + "\n")
        yield Desk(opened.stack, tokens)


def test_votes_print_where_the_review_stands_until_the_last_commits(desk: Desk, tmp_path: Path) -> None:
    op = str(desk("start", str(proposal_file(tmp_path)), who="ava").document["operation_id"])

    first = desk("approve", op, "--json", who="lena")

    assert first.exit_code == 0, first.stderr
    assert first.document["outcome"] == "AWAITING_APPROVALS" and first.document["replay"] is False
    progress = first.document["progress"]
    assert isinstance(progress, dict) and progress["deadline"]
    assert progress == {
        "stage": "leads",
        "stage_index": 0,
        "stage_count": 2,
        "approvals_given": ["lena"],
        "approvals_needed": 2,
        "eligible_groups": ["support-leads"],
        "due": None,
        "escalated": False,
        "deadline": progress["deadline"],
    }
    assert first.stderr == f"vote recorded on {op}: waiting for 1 more (1 of 2 approvals in stage leads, by lena)\n"

    status = desk("status", op, who="oli")
    show = desk("show", op, who="oli")

    assert status.exit_code == 0 and show.exit_code == 0
    assert status.document["progress"] == show.document["progress"] == first.document["progress"]
    assert status.stderr.startswith(
        f"operation {op}: PENDING_REVIEW; stage 1 of 2; 1 of 2 approvals in stage leads, by lena; "
        "decided by support-leads; deadline "
    )
    assert "stage 1 of 2; 1 of 2 approvals in stage leads, by lena" in show.stderr

    second = desk("approve", op, who="lou")
    assert second.exit_code == 0
    assert second.stderr == f"vote recorded on {op}: waiting for 1 more (0 of 1 approvals in stage finance)\n"
    assert desk.stack.effects("T-1042") == 0

    last = desk("approve", op, who="fay")
    assert last.exit_code == 0, last.stderr
    assert last.document["outcome"] == "COMMITTED"
    assert desk.stack.effects("T-1042") == 1


def test_a_vote_the_rule_does_not_count_is_refused_exit_3_with_its_advice(desk: Desk, tmp_path: Path) -> None:
    op = str(desk("start", str(proposal_file(tmp_path)), who="ava").document["operation_id"])

    refused = desk("approve", op, who="oli")
    declined = desk("decline", op, who="fay")  # finance, but the current stage is the leads'

    for run in (refused, declined):
        assert run.exit_code == 3, run.stderr
        assert run.document["exit_code"] == 3
        error = run.document["error"]
        assert isinstance(error, dict)
        assert (error["code"], error["reason"]) == ("PERMISSION_DENIED", "NOT_ELIGIBLE_TO_DECIDE")
        assert error["definite"] is True
        assert error["metadata"]["vote_refusal"] == "not_eligible"
        assert f"the review's rule does not count your vote on {op}" in run.stderr
        assert "repeating will not help" in run.stderr
    status = desk("status", op, who="oli")
    assert status.document["progress"]["approvals_given"] == []  # type: ignore[index]
    assert desk.stack.effects("T-1042") == 0
