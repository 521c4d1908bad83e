"""``decisionflow pending`` run as a reviewer runs it (a subprocess) against a real orchestrator with
authentication on: the inbox as a table and as JSON Lines, its filters and limit, and refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.review_cli import Cli, proposal_file

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def pending(cli: Cli, *args: str, principal: str = "rita") -> subprocess.CompletedProcess[str]:
    """Run ``decisionflow pending ARGS`` as a separate process, as principal."""
    argv = [sys.executable, "-m", "decisionflow_cli", "pending", *args, "--target", cli.target]
    argv += ["--token-file", str(cli.tokens[principal])]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _started(cli: Cli, directory: Path, case_id: str, hold_version: int = 2) -> str:
    run = cli("start", str(proposal_file(directory, case_id, hold_version)), principal="ava")
    assert run.exit_code == 0, run.stderr
    return str(run.document["operation_id"])


def test_pending_prints_the_inbox_oldest_first_and_filters_it(make_cli: Callable[..., Cli], tmp_path: Path) -> None:
    cli = make_cli()
    first = _started(cli, tmp_path, "T-1")
    replaced = _started(cli, tmp_path, "T-2")
    decided = _started(cli, tmp_path, "T-3")
    assert cli("decline", decided).exit_code == 0
    replacement = cli(
        "start", str(proposal_file(tmp_path, "T-2", 3)), "--expected-operation-id", replaced, principal="ava"
    )
    assert replacement.exit_code == 0, replacement.stderr
    second = str(replacement.document["operation_id"])

    table = pending(cli)
    as_json = pending(cli, "--json")
    of_case = pending(cli, "--case", "T-2", "--json", principal="ops")
    by_prefix = pending(cli, "--case-prefix", "T-1", "--json", principal="ava")
    by_other_author = pending(cli, "--author", "rita", "--json")
    limited = pending(cli, "--limit", "1", "--json")

    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["OPERATION", "CASE", "AUTHOR", "VERSIONS", "AGE", "ACTION"]
    assert [row.split()[:4] for row in rows] == [[first, "T-1", "ava", "1"], [second, "T-2", "ava", "2"]]
    assert all(row.split()[-1] == "record_support_review" for row in rows)
    assert "2 pending review(s)" in table.stderr

    lines = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(e["proposal"]["operation_id"], e["versions"]) for e in lines] == [(first, 1), (second, 2)]
    assert lines[1]["proposal"]["parent_operation_id"] == replaced
    assert lines[1]["pending_review"]["operation_id"] == second
    assert all(isinstance(e["age_seconds"], float) and e["age_seconds"] >= 0 for e in lines)
    assert [json.loads(line)["proposal"]["case_id"] for line in of_case.stdout.splitlines()] == ["T-2"]
    assert [json.loads(line)["proposal"]["case_id"] for line in by_prefix.stdout.splitlines()] == ["T-1"]
    assert by_other_author.returncode == 0 and by_other_author.stdout == ""
    assert limited.returncode == 0 and len(limited.stdout.splitlines()) == 1


def test_pending_refusals_exit_with_one_line(make_cli: Callable[..., Cli]) -> None:
    cli = make_cli()
    bad_filter = pending(cli, "--action", "wire_money")
    assert bad_filter.returncode == 3 and bad_filter.stdout == ""
    assert "INVALID_ARGUMENT" in bad_filter.stderr and "action" in bad_filter.stderr
    both = pending(cli, "--case", "T-1", "--case-prefix", "T-")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
