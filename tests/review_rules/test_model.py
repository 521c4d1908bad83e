"""The rule model: the default rule is today's behaviour, every constraint is refused naming its field,
and one rule has one form whatever order its groups were given in."""

from __future__ import annotations

from datetime import timedelta

import pytest

from decisionflow.review_rules import (
    InvalidRule,
    ReviewRule,
    RuleSet,
    Stage,
    default_rule,
    format_duration,
    parse_duration,
)


def _problems(build: object) -> list[str]:
    assert callable(build)
    with pytest.raises(InvalidRule) as refused:
        build()
    return [str(problem) for problem in refused.value.problems]


def test_the_default_rule_is_one_stage_any_reviewer_one_approval_one_decline_no_times() -> None:
    rule = default_rule("record_support_review")
    assert rule == ReviewRule("record_support_review", (Stage("review", (), 1, 1, None, ()),), None, True)
    assert rule.groups == ()


def test_groups_are_kept_in_code_point_order() -> None:
    stage = Stage("leads", ("b", "9", "a"), due=timedelta(hours=1), escalate_to=("z", "y-1"))
    assert stage.groups == ("9", "a", "b")
    assert stage.escalate_to == ("y-1", "z")
    assert stage == Stage("leads", ("a", "b", "9"), due=timedelta(hours=1), escalate_to=("z", "y-1"))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"approvals": 0}, "approvals: must be a whole number from 1 to 100, not 0"),
        ({"approvals": 101}, "approvals: must be a whole number from 1 to 100, not 101"),
        ({"approvals": True}, "approvals: must be a whole number from 1 to 100, not True"),
        ({"declines_to_end": 0}, "declines_to_end: must be a whole number from 1 to 100, not 0"),
        ({"name": "two words"}, "name: 'two words' is not a valid stage name: 1 to 64 of letters, digits, '_', '-'"),
        (
            {"groups": ("a b",)},
            "groups: 'a b' is not a group name: 1 to 64 of lowercase letters, digits, '.', '_', '-', "
            "starting with a letter or digit",
        ),
        ({"groups": ("a", "a")}, "groups: 'a' is named twice"),
        ({"groups": ("a",), "escalate_to": ("b",)}, "escalate_to: needs due: a stage escalates once it is due"),
        (
            {"escalate_to": ("b",), "due": timedelta(hours=1)},
            "escalate_to: needs groups: a stage open to any reviewer cannot widen",
        ),
        (
            {"groups": ("a",), "escalate_to": ("a",), "due": timedelta(hours=1)},
            "escalate_to: 'a' is already one of the stage's groups",
        ),
        ({"due": timedelta(0)}, "due: must be whole seconds from 1s to 365d, not 0:00:00"),
        ({"due": timedelta(seconds=1.5)}, "due: must be whole seconds from 1s to 365d, not 0:00:01.500000"),
        ({"due": timedelta(days=366)}, "due: must be whole seconds from 1s to 365d, not 366 days, 0:00:00"),
        ({"groups": tuple(f"g{n}" for n in range(33))}, "groups: names 33 groups, at most 32 are allowed"),
    ],
)
def test_a_stage_is_refused_naming_the_field_at_fault(values: dict[str, object], expected: str) -> None:
    fields: dict[str, object] = {"name": "leads", **values}
    assert _problems(lambda: Stage(**fields)) == [expected]  # type: ignore[arg-type]


def test_every_fault_of_a_stage_is_named_at_once() -> None:
    problems = _problems(lambda: Stage("", ("ok", "ok"), 0, 0, None, ("x",)))
    assert [problem.split(":")[0] for problem in problems] == [
        "name",
        "groups",
        "approvals",
        "declines_to_end",
        "escalate_to",
    ]


def test_a_rule_is_refused_for_what_spans_its_stages() -> None:
    leads = Stage("leads", ("a",), due=timedelta(hours=4))
    assert _problems(lambda: ReviewRule("refund", ())) == ["stages: needs at least one stage"]
    assert _problems(lambda: ReviewRule("refund", (leads, leads))) == [
        "stages[1].name: 'leads' is already the name of stages[0]"
    ]
    assert _problems(lambda: ReviewRule("refund", (leads,), timedelta(hours=4))) == [
        "stages[0].due: 4h is not before the deadline, 4h: the review would expire first"
    ]
    assert _problems(lambda: ReviewRule("re.fund", (leads,))) == [
        "action: 're.fund' is not a valid action name: 1 to 64 of letters, digits, '_', '-'"
    ]
    many = tuple(Stage(f"s{n}") for n in range(11))
    assert _problems(lambda: ReviewRule("refund", many)) == ["stages: has 11 stages, at most 10 are allowed"]


def test_a_rule_set_gives_its_rules_and_the_default_rule_for_any_other_action() -> None:
    refund = ReviewRule("refund", (Stage("leads", ("support-leads",), 2),))
    rules = RuleSet({"refund": refund})
    assert rules.rule_for("refund") is refund
    assert rules.rule_for("record_support_review") == default_rule("record_support_review")
    assert RuleSet().rule_for("refund") == default_rule("refund")
    with pytest.raises(ValueError, match="the rule filed under 'other' is the rule of 'refund'"):
        RuleSet({"other": refund})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("4h", 14400), ("2d", 172800), ("1h30m", 5400), ("1d2h3m4s", 93784), ("0s", 0)],
)
def test_durations_are_read_as_the_file_writes_them(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "4", "h", "4 h", "1m1h", "1h1h", "-1h", "1.5h", "4H", "1w", "1h 30m"])
def test_a_duration_in_another_form_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration: write whole numbers with units d, h, m, s"):
        parse_duration(text)


def test_a_duration_is_written_back_in_its_shortest_form() -> None:
    assert [format_duration(parse_duration(text)) for text in ("90s", "72h", "1h30m", "60m", "86400s")] == [
        "1m30s",
        "3d",
        "1h30m",
        "1h",
        "1d",
    ]
