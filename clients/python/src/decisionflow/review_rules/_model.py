"""The review rule of an action: ordered stages, each decided by members of its groups (docs/review-rules.md).

A stage needs ``approvals`` distinct eligible approvals; ``declines_to_end`` eligible declines end
the whole review. A stage open to any reviewer has no groups. Once a stage is due and has been
escalated, members of ``escalate_to`` may decide it too. The rule's ``deadline`` bounds the whole
review; ``distinct_across_stages`` keeps one principal from counting in two stages.

Every constraint is checked by ``stage_problems`` and ``rule_problems``, which return every fault
with the field it is in; the dataclasses call them and refuse to exist otherwise, and the file
loader calls them to report all faults of a file at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType

from decisionflow.review_rules._durations import format_duration
from decisionflow.review_rules._errors import InvalidRule, RuleProblem
from decisionflow.vocabulary import GROUP_NAME

MAX_STAGES = 10
MAX_COUNT = 100
"""The most approvals a stage may need, and the most declines it may take to end a review."""
MAX_GROUPS = 32
"""The most groups a stage, or its escalation, may name."""
MAX_DURATION = timedelta(days=365)
DEFAULT_STAGE_NAME = "review"

# Action and stage names are TOML bare keys (so a file names them unquoted) and log fields.
NAME_PATTERN = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
# Group names are the identities' own (decisionflow.vocabulary.GROUP_NAME): a rule naming any other
# spelling could never be met.
GROUP_PATTERN = GROUP_NAME

Where = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage of a review: who may decide it, how many must approve, how many declines end it."""

    name: str
    """Unique within its rule: the stage a progress report, a log line and an escalation names."""
    groups: tuple[str, ...] = ()
    """Members of any of these may decide the stage, in code point order; empty: any reviewer."""
    approvals: int = 1
    """Distinct eligible approvals that complete the stage."""
    declines_to_end: int = 1
    """Eligible declines in this stage that end the whole review as declined."""
    due: timedelta | None = None
    """How long after the stage begins it is due (and may be escalated); None: never."""
    escalate_to: tuple[str, ...] = ()
    """Groups that may decide the stage too once it is escalated, in code point order."""

    def __post_init__(self) -> None:
        # Order is not meaning: sorted here, a rule has one form and one encoding.
        # key=str: a value that is not text is reported by stage_problems, not raised by sorted.
        object.__setattr__(self, "groups", tuple(sorted(self.groups, key=str)))
        object.__setattr__(self, "escalate_to", tuple(sorted(self.escalate_to, key=str)))
        problems = stage_problems(
            self.name, self.groups, self.approvals, self.declines_to_end, self.due, self.escalate_to
        )
        if problems:
            raise InvalidRule(problems)


@dataclass(frozen=True, slots=True)
class ReviewRule:
    """The rule one action's reviews follow: its stages in order and the review's deadline."""

    action: str
    stages: tuple[Stage, ...]
    """In the order they are decided; at least one."""
    deadline: timedelta | None = None
    """How long after the review starts it expires unless decided; None: never."""
    distinct_across_stages: bool = True
    """True: a principal who decided one stage may not decide a later one."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        outline = [(stage.name, stage.due) for stage in self.stages]
        problems = rule_problems(self.action, outline, self.deadline, self.distinct_across_stages)
        if problems:
            raise InvalidRule(problems)

    @property
    def groups(self) -> tuple[str, ...]:
        """Every group the rule names, as a stage's or an escalation's, in code point order."""
        return tuple(sorted({group for stage in self.stages for group in (*stage.groups, *stage.escalate_to)}))


def default_rule(action: str) -> ReviewRule:
    """Return the rule of an action no file names: one stage, any reviewer, one approval, one decline ends it."""
    return ReviewRule(action, (Stage(DEFAULT_STAGE_NAME),))


@dataclass(frozen=True)
class RuleSet:
    """The rules of a file by action; an action it does not name follows ``default_rule``."""

    rules: Mapping[str, ReviewRule] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for action, rule in self.rules.items():
            if rule.action != action:
                raise ValueError(f"the rule filed under {action!r} is the rule of {rule.action!r}")
        object.__setattr__(self, "rules", MappingProxyType(dict(sorted(self.rules.items()))))

    def rule_for(self, action: str) -> ReviewRule:
        """Return the action's rule: the one the set names, else the default rule."""
        return self.rules.get(action) or default_rule(action)


def stage_problems(
    name: str,
    groups: Sequence[str],
    approvals: int,
    declines_to_end: int,
    due: timedelta | None,
    escalate_to: Sequence[str],
) -> list[RuleProblem]:
    """Return every constraint a stage with these values breaks, each naming its field (empty: a valid stage)."""
    problems = _name_problems(("name",), name, "stage name")
    problems += _group_problems(("groups",), groups)
    problems += _count_problems(("approvals",), approvals)
    problems += _count_problems(("declines_to_end",), declines_to_end)
    problems += _duration_problems(("due",), due)
    problems += _group_problems(("escalate_to",), escalate_to)
    if escalate_to and due is None:
        problems.append(RuleProblem(("escalate_to",), "needs due: a stage escalates once it is due"))
    if escalate_to and not groups:
        problems.append(RuleProblem(("escalate_to",), "needs groups: a stage open to any reviewer cannot widen"))
    for group in sorted(set(escalate_to) & set(groups)):
        problems.append(RuleProblem(("escalate_to",), f"{group!r} is already one of the stage's groups"))
    return problems


def rule_problems(
    action: str,
    stages: Sequence[tuple[str, timedelta | None]],
    deadline: timedelta | None,
    distinct_across_stages: bool = True,
) -> list[RuleProblem]:
    """Return every constraint a rule breaks across its stages (each given as name and due) and in its own
    fields; each stage's own fields are ``stage_problems``'s."""
    problems = _name_problems(("action",), action, "action name")
    if not stages:
        problems.append(RuleProblem(("stages",), "needs at least one stage"))
    if len(stages) > MAX_STAGES:
        problems.append(RuleProblem(("stages",), f"has {len(stages)} stages, at most {MAX_STAGES} are allowed"))
    problems += _duration_problems(("deadline",), deadline)
    if not isinstance(distinct_across_stages, bool):
        problems.append(RuleProblem(("distinct_across_stages",), "must be true or false"))
    first_of: dict[str, int] = {}
    for index, (name, due) in enumerate(stages):
        if name in first_of:
            where: Where = ("stages", index, "name")
            problems.append(RuleProblem(where, f"{name!r} is already the name of stages[{first_of[name]}]"))
        first_of.setdefault(name, index)
        if due is not None and deadline is not None and isinstance(due, timedelta) and due >= deadline:
            shown = f"{_shown(due)} is not before the deadline, {_shown(deadline)}"
            problems.append(RuleProblem(("stages", index, "due"), f"{shown}: the review would expire first"))
    return problems


def _shown(duration: timedelta) -> str:
    try:
        return format_duration(duration)
    except ValueError:
        return str(duration)


def _name_problems(where: Where, name: object, what: str) -> list[RuleProblem]:
    if isinstance(name, str) and NAME_PATTERN.match(name):
        return []
    return [RuleProblem(where, f"{name!r} is not a valid {what}: 1 to 64 of letters, digits, '_', '-'")]


def _group_problems(where: Where, groups: Sequence[str]) -> list[RuleProblem]:
    problems = []
    if len(groups) > MAX_GROUPS:
        problems.append(RuleProblem(where, f"names {len(groups)} groups, at most {MAX_GROUPS} are allowed"))
    seen: set[str] = set()
    for group in groups:
        if not isinstance(group, str) or not GROUP_PATTERN.fullmatch(group):
            problems.append(
                RuleProblem(
                    where,
                    f"{group!r} is not a group name: 1 to 64 of lowercase letters, digits, '.', '_', '-', "
                    "starting with a letter or digit",
                )
            )
        elif group in seen:
            problems.append(RuleProblem(where, f"{group!r} is named twice"))
        else:
            seen.add(group)
    return problems


def _count_problems(where: Where, count: int) -> list[RuleProblem]:
    # bool is an int subclass; true is not a number of approvals.
    if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_COUNT:
        return []
    return [RuleProblem(where, f"must be a whole number from 1 to {MAX_COUNT}, not {count!r}")]


def _duration_problems(where: Where, duration: timedelta | None) -> list[RuleProblem]:
    if duration is None:
        return []
    if not isinstance(duration, timedelta):
        return [RuleProblem(where, f"must be a duration, not {duration!r}")]
    if duration.microseconds or not timedelta(seconds=1) <= duration <= MAX_DURATION:
        return [RuleProblem(where, f"must be whole seconds from 1s to {format_duration(MAX_DURATION)}, not {duration}")]
    return []
