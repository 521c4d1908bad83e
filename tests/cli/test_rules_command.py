"""``decisionflow rules check`` as a user runs it: the console script of the virtual environment, found on
PATH. A good file is summarised (exit 0), a bad one refused with every problem at its line (exit 1);
groups nobody is known to hold and actions nobody serves are warnings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.rules_desk import timed_two_stages, write_rules

RULES = timed_two_stages()


def _check(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    return subprocess.run(
        ["decisionflow", "rules", "check", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env=env,
    )


def test_a_good_file_is_summarised_and_exits_0(tmp_path: Path) -> None:
    write_rules(tmp_path, RULES)
    done = _check("rules.toml", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "rules.toml: 1 action, 2 stages, 3 groups",
        "record_support_review: deadline 3d; a principal counts in one stage only",
        "  1. leads: 2 approvals from support-leads; 1 decline ends the review; due 4h, then also from on-call-leads",
        "  2. finance: 1 approval from finance; 1 decline ends the review",
        "groups: finance, on-call-leads, support-leads",
        "any other action (the default rule): review: 1 approval from any reviewer; 1 decline ends the review;"
        " no deadline",
    ]


def test_a_bad_file_lists_every_problem_at_its_line_and_exits_1(tmp_path: Path) -> None:
    bad = RULES.replace("approvals = 2", "approvals = 0").replace('due = "4h"\n', "").replace("finance", "leads", 1)
    write_rules(tmp_path, bad.replace('groups = ["finance"]', 'group = ["finance"]'))
    done = _check("rules.toml", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        "rules.toml:9: actions.record_support_review.stages[0].approvals: must be a whole number from 1 to 100, not 0",
        "rules.toml:10: actions.record_support_review.stages[0].escalate_to: needs due: a stage escalates once it is"
        " due",
        "rules.toml:13: actions.record_support_review.stages[1].name: 'leads' is already the name of stages[0]",
        "rules.toml:14: actions.record_support_review.stages[1].group: unknown key (did you mean 'groups'?)",
    ]


def test_distinct_across_stages_false_is_refused_as_not_supported_yet_and_exits_1(tmp_path: Path) -> None:
    write_rules(tmp_path, RULES.replace('deadline = "72h"\n', 'deadline = "72h"\ndistinct_across_stages = false\n'))
    done = _check("rules.toml", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "rules.toml:5: actions.record_support_review.distinct_across_stages: false is not supported yet: a principal "
        "votes once per review, so counts in one stage only; leave the key out (true)\n"
    )


def test_a_syntax_error_and_a_missing_file_exit_1(tmp_path: Path) -> None:
    write_rules(tmp_path, "version = 1\n[actions.x\n")
    done = _check("rules.toml", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "rules.toml:2: not valid TOML: Expected ']' at the end of a table declaration (column 11)\n"
    done = _check("absent.toml", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (1, "absent.toml: cannot read the rules file: No such file or directory\n")


def test_groups_outside_known_groups_and_unserved_actions_are_warnings(tmp_path: Path) -> None:
    write_rules(tmp_path, RULES.replace("record_support_review", "refund"))
    done = _check("rules.toml", "--known-groups", "finance, support-leads", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("rules.toml: 1 action, 2 stages, 3 groups\n")
    assert done.stderr.splitlines() == [
        "rules.toml:3: warning: the orchestrator serves no action 'refund' (it serves record_support_review)",
        "rules.toml:11: warning: group 'on-call-leads' is not among --known-groups",
    ]


@pytest.mark.parametrize(
    ("entries", "warned"),
    [
        (
            {
                "tokens": [
                    {"principal": "lena", "sha256": "0" * 64, "roles": ["reviewer"], "groups": ["support-leads"]}
                ],
                "certificates": [{"principal": "fred", "roles": ["reviewer"], "groups": ["finance"]}],
            },
            [(11, "on-call-leads")],
        ),
        # Credentials without groups hold none: every group is warned of, each once, at its first line.
        (
            {"tokens": [{"principal": "lena", "sha256": "0" * 64, "roles": ["reviewer"]}]},
            [(8, "support-leads"), (11, "on-call-leads"), (15, "finance")],
        ),
    ],
)
def test_groups_no_credential_holds_are_warnings(
    tmp_path: Path, entries: dict[str, object], warned: list[tuple[int, str]]
) -> None:
    write_rules(tmp_path, RULES)
    (tmp_path / "credentials.json").write_text(json.dumps(entries), encoding="utf-8")
    done = _check("rules.toml", "--credentials", "credentials.json", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("rules.toml: 1 action")
    assert done.stderr.splitlines() == [
        f"rules.toml:{line}: warning: group {group!r} is held by no token or certificate of credentials.json"
        " (an OIDC groups claim may still carry it)"
        for line, group in warned
    ]


def test_an_unreadable_credentials_file_and_both_sources_at_once_are_usage_errors(tmp_path: Path) -> None:
    write_rules(tmp_path, RULES)
    (tmp_path / "credentials.json").write_text("{not json", encoding="utf-8")
    done = _check("rules.toml", "--credentials", "credentials.json", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("decisionflow rules: 'credentials.json' is not a JSON credentials file: ")
    done = _check("rules.toml", "--credentials", "credentials.json", "--known-groups", "a", cwd=tmp_path)
    assert done.returncode == 2
    assert "argument --known-groups: not allowed with argument --credentials" in done.stderr
