"""The review rules in force in an orchestrator: the default rule without a file, the file's rules
with one, a file with a problem refused at start-up naming FILE:LINE (a configuration error, exit 2),
and a reload (what SIGHUP calls) that swaps in a good file and keeps the rules in force on a bad one,
logging why."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from decisionflow.review_rules import default_rule
from decisionflow_server.foundation.startup_errors import EXIT_CONFIGURATION, StartupError
from orchestrator.rules_in_force import RulesInForce
from tests.support.rules_desk import TWO_STAGES, write_rules
from tests.support.stack import Stack, open_stack

ONE_STAGE = """\
version = 1

[[actions.record_support_review.stages]]
name = "leads"
groups = ["support-leads"]
"""
# Line 5 names a key no stage has.
MISSPELT = """\
version = 1

[[actions.record_support_review.stages]]
name = "leads"
aprovals = 2
"""


def test_without_a_file_every_action_follows_the_default_rule() -> None:
    rules = RulesInForce.at_start(None)
    assert rules.rule_for("record_support_review") == default_rule("record_support_review")
    assert rules.rule_for("anything_else") == default_rule("anything_else")
    assert not rules.reload()


def test_a_file_gives_its_actions_their_rules_and_the_others_the_default(tmp_path: Path) -> None:
    rules = RulesInForce.at_start(write_rules(tmp_path, TWO_STAGES))
    rule = rules.rule_for("record_support_review")
    assert [(s.name, s.groups, s.approvals) for s in rule.stages] == [
        ("leads", ("support-leads",), 2),
        ("finance", ("finance",), 1),
    ]
    assert rules.rule_for("refund") == default_rule("refund")


def test_a_file_with_a_problem_refuses_the_start_naming_file_and_line(tmp_path: Path) -> None:
    path = write_rules(tmp_path, MISSPELT)
    with pytest.raises(StartupError) as refused:
        RulesInForce.at_start(path)
    assert refused.value.exit_status == EXIT_CONFIGURATION
    assert str(refused.value).startswith(
        f"cannot use the review rules file (--review-rules-file / DECISIONFLOW_REVIEW_RULES_FILE): {path}:5: "
    )
    assert "aprovals" in str(refused.value)


def test_distinct_across_stages_false_refuses_the_start_as_not_supported_yet(tmp_path: Path) -> None:
    text = TWO_STAGES.replace(
        "version = 1\n", "version = 1\n\n[actions.record_support_review]\ndistinct_across_stages = false\n"
    )
    path = write_rules(tmp_path, text)
    with pytest.raises(StartupError) as refused:
        RulesInForce.at_start(path)
    assert refused.value.exit_status == EXIT_CONFIGURATION
    assert f"{path}:4: actions.record_support_review.distinct_across_stages: false is not supported yet" in str(
        refused.value
    )


def test_a_missing_file_refuses_the_start(tmp_path: Path) -> None:
    with pytest.raises(StartupError) as refused:
        RulesInForce.at_start(tmp_path / "absent.toml")
    assert refused.value.exit_status == EXIT_CONFIGURATION
    assert "cannot read the rules file" in str(refused.value)


def test_a_reload_swaps_a_good_file_in_and_keeps_the_rules_on_a_bad_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_rules(tmp_path, TWO_STAGES)
    rules = RulesInForce.at_start(path)
    path.write_text(ONE_STAGE, encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="decisionflow.orchestrator"):
        assert rules.reload()
    assert len(rules.rule_for("record_support_review").stages) == 1
    assert "review rules reloaded" in caplog.text

    caplog.clear()
    path.write_text(MISSPELT, encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="decisionflow.orchestrator"):
        assert not rules.reload()
    assert len(rules.rule_for("record_support_review").stages) == 1
    [record] = caplog.records
    assert record.levelno == logging.ERROR and f"{path}:5:" in record.getMessage()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A receiver and an orchestrator started with a rules file."""
    opened = open_stack(tmp_path, review_rules_file=write_rules(tmp_path, TWO_STAGES))
    try:
        yield opened
    finally:
        opened.close()


def test_a_server_with_a_rules_file_rereads_it_on_sighup(stack: Stack, tmp_path: Path) -> None:
    # Authentication is off in this stack: the rules file is all SIGHUP re-reads.
    [reload] = stack.servers[-1].reload
    (tmp_path / "rules.toml").write_text(ONE_STAGE, encoding="utf-8")
    assert reload() is True
    (tmp_path / "rules.toml").write_text(MISSPELT, encoding="utf-8")
    assert reload() is False


def test_a_server_with_a_bad_rules_file_does_not_start(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r"rules\.toml:5: "):
        open_stack(tmp_path, review_rules_file=write_rules(tmp_path, MISSPELT))
