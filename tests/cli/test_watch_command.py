"""``decisionflow watch`` against a real orchestrator with authentication on: the event feed as JSON lines,
waiting for an operation's outcome without polling (run as a separate process while the approval is
made), a wait that ends first, and an author's refusal to watch every case."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from decisionflow.transparency import decode_leaf
from tests.support.review_cli import Cli
from tests.support.stack import approve, start_request

# Real services: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def _started(cli: Cli, case_id: str = "T-1") -> str:
    review = cli.stack.review()
    started = review.StartReview(start_request(case_id), metadata=_bearer(cli, "ava"), timeout=15)
    return started.proposal.operation_id


def _bearer(cli: Cli, principal: str) -> tuple[tuple[str, str]]:
    return (("authorization", "Bearer " + cli.tokens[principal].read_text().strip()),)


def test_watch_prints_each_event_as_a_json_line(make_cli: Callable[..., Cli]) -> None:
    cli = make_cli()
    operation_id = _started(cli)
    cli.stack.review().Approve(approve(operation_id), metadata=_bearer(cli, "rita"), timeout=15)

    code, out, err = cli.raw("watch", "--json", "--count", "3", principal="audrey")

    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(e["index"], e["kind"], e["state"]) for e in lines] == [
        (0, "proposal", "PENDING_REVIEW"),
        (1, "decision", "APPROVED"),
        (2, "effect", "COMMITTED"),
    ]
    assert {e["operation_id"] for e in lines} == {operation_id}
    assert lines[0]["principal"] == "ava" and lines[1]["principal"] == "rita" and lines[1]["decision"] == "APPROVE"
    # The leaf is the audit log's bytes: what an inclusion proof proves.
    assert decode_leaf(base64.b64decode(lines[2]["leaf"])).operation_id == operation_id
    assert err.endswith("watch: 3 events\n")


def test_watch_outcome_waits_in_its_own_process_until_the_operation_is_settled(make_cli: Callable[..., Cli]) -> None:
    cli = make_cli()
    operation_id = _started(cli)
    argv = [sys.executable, "-m", "decisionflow_cli", "watch", "--outcome", operation_id, "--seconds", "60"]
    argv += ["--target", cli.target, "--token-file", str(cli.tokens["ava"])]
    waiting = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        assert waiting.poll() is None, waiting.communicate()
        cli.stack.review().Approve(approve(operation_id), metadata=_bearer(cli, "rita"), timeout=15)
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    document = json.loads(out)
    assert document["settled"] is True and document["state"] == "COMMITTED"
    assert document["operation"]["receipt"]["receipt_id"]
    assert err.startswith(f"operation {operation_id}: COMMITTED, receipt ")


def test_watch_outcome_that_ends_first_says_where_the_operation_stands(make_cli: Callable[..., Cli]) -> None:
    cli = make_cli()
    operation_id = _started(cli)

    code, out, err = cli.raw("watch", "--outcome", operation_id, "--seconds", "0.5", principal="ava")

    assert code == 1
    document = json.loads(out)
    assert document["settled"] is False and document["operation"]["state"] == "PENDING_REVIEW"
    assert "still PENDING_REVIEW" in err


def test_an_author_must_name_a_case_they_proposed_in(make_cli: Callable[..., Cli]) -> None:
    cli = make_cli()
    _started(cli)

    code, out, _ = cli.raw("watch", "--json", "--count", "1", principal="ava")
    assert code == 3
    assert json.loads(out)["error"]["reason"] == "INVALID_ARGUMENT"
    code, out, _ = cli.raw("watch", "--json", "--case-id", "T-9", "--count", "1", principal="ava")
    assert code == 3
    assert json.loads(out)["error"]["reason"] == "NOT_FOUND"
    code, out, _ = cli.raw("watch", "--json", "--case-id", "T-1", "--count", "1", principal="ava")
    assert code == 0 and json.loads(out)["case_id"] == "T-1"
