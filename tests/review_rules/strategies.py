"""Hypothesis strategies for review rules: valid rules over a small world of groups and principals, so
that votes, authors and escalations meet the rules' groups often."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import strategies as st

from decisionflow.review_rules import MAX_DURATION, ReviewRule, Stage
from decisionflow.vocabulary import GROUP_NAME

GROUPS = ("g0", "g1", "g2", "g3")
PRINCIPALS = ("p0", "p1", "p2", "p3", "p4", "p5")

# Any valid name or group, for the encoding; the small world above, for evaluation.
names = st.text(st.sampled_from("abz09_-AZ"), min_size=1, max_size=8)
group_names = st.from_regex(GROUP_NAME, fullmatch=True).filter(lambda name: len(name) <= 12)
durations = st.integers(1, int(MAX_DURATION.total_seconds())).map(lambda seconds: timedelta(seconds=seconds))
# Minutes to a few hours: the span votes are cast over, so due times and deadlines fall among them.
short_durations = st.integers(1, 240).map(lambda minutes: timedelta(minutes=minutes))


@st.composite
def stages(
    draw: st.DrawFn,
    name: str,
    groups: st.SearchStrategy[str],
    lengths: st.SearchStrategy[timedelta],
    deadline: timedelta | None,
) -> Stage:
    """A valid stage: escalation only with due and groups, disjoint from its groups; due before deadline."""
    members = draw(st.lists(groups, unique=True, max_size=3))
    due = draw(st.none() | lengths)
    if due is not None and deadline is not None and due >= deadline:
        due = None
    escalate_to: list[str] = []
    if due is not None and members:
        others = groups.filter(lambda group: group not in members)
        escalate_to = draw(st.lists(others, unique=True, min_size=draw(st.integers(0, 1)), max_size=2))
    approvals = draw(st.integers(1, 3))
    declines = draw(st.integers(1, 2))
    return Stage(name, tuple(members), approvals, declines, due, tuple(escalate_to))


@st.composite
def rules(draw: st.DrawFn, small_world: bool = False) -> ReviewRule:
    """A valid rule of 1 to 3 stages."""
    groups = st.sampled_from(GROUPS) if small_world else group_names
    lengths = short_durations if small_world else durations
    # In the small world a deadline comes after several due times, so that stages escalate before it.
    deadline = draw(st.none() | (short_durations.map(lambda due: due * 4) if small_world else durations))
    count = draw(st.integers(1, 3))
    stage_names = draw(st.lists(names, min_size=count, max_size=count, unique=True))
    chosen = tuple(draw(stages(name, groups, lengths, deadline)) for name in stage_names)
    return ReviewRule(draw(names), chosen, deadline, draw(st.booleans()))


@st.composite
def escalating_rules(draw: st.DrawFn) -> ReviewRule:
    """A rule whose every stage is due within the hour and escalates: the cases escalation decides."""
    count = draw(st.integers(1, 3))
    chosen = []
    for index in range(count):
        members = draw(st.lists(st.sampled_from(GROUPS[:2]), min_size=1, unique=True))
        escalate_to = draw(st.lists(st.sampled_from(GROUPS[2:]), min_size=1, unique=True))
        due = timedelta(minutes=draw(st.integers(1, 60)))
        chosen.append(Stage(f"s{index}", tuple(members), draw(st.integers(1, 3)), 2, due, tuple(escalate_to)))
    return ReviewRule("escalating", tuple(chosen), None, draw(st.booleans()))
