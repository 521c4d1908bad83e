"""The rules file: TOML read with tomllib into a ``RuleSet`` (docs/review-rules.md, "The file").

    version = 1
    [actions.refund]
    deadline = "72h"                      # optional
    distinct_across_stages = true         # optional, true by default; false is refused (not supported yet)
    [[actions.refund.stages]]             # one table per stage, in order
    name = "leads"
    groups = ["support-leads"]            # optional, empty: any reviewer
    approvals = 2                         # optional, 1 by default
    declines_to_end = 1                   # optional, 1 by default
    due = "4h"                            # optional
    escalate_to = ["on-call-leads"]       # optional, needs due

A file is accepted whole or refused whole: ``RulesFileError`` lists every problem found, each as
``FILE:LINE: message``. An unknown key is a problem, so a misspelt key never passes as a default.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from decisionflow.review_rules._durations import parse_duration
from decisionflow.review_rules._errors import FileProblem, RuleProblem, RulesFileError
from decisionflow.review_rules._lines import KeyLines
from decisionflow.review_rules._model import ReviewRule, RuleSet, Stage, rule_problems, stage_problems

FILE_VERSION = 1
_TOP_KEYS = ("version", "actions")
_RULE_KEYS = ("deadline", "distinct_across_stages", "stages")
_STAGE_KEYS = ("name", "groups", "approvals", "declines_to_end", "due", "escalate_to")
_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\Z")

Where = tuple[str | int, ...]


def load_rules(path: str | os.PathLike[str]) -> RuleSet:
    """Return the rule set the file at path holds; RulesFileError listing every problem when it holds none."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise RulesFileError([FileProblem(name, None, f"cannot read the rules file: {exc.strerror or exc}")]) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise RulesFileError([FileProblem(name, line, "not UTF-8 text")]) from exc
    return parse_rules(text, name)


def parse_rules(text: str, file: str = "rules") -> RuleSet:
    """Return the rule set a rules file's text holds; RulesFileError naming file and line for every problem."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesFileError([_syntax_problem(str(exc), text, file)]) from exc
    reading = _Reading()
    rules = reading.rule_set(document)
    if reading.problems:
        lines = KeyLines(text)
        found = [FileProblem(file, lines.line_of(p.where), str(p)) for p in reading.problems]
        raise RulesFileError(sorted(found, key=lambda problem: problem.line or 0))
    return rules


def _syntax_problem(message: str, text: str, file: str) -> FileProblem:
    found = _POSITION.search(message)
    if found is None:
        reason = message.removesuffix(" (at end of document)")
        return FileProblem(file, max(1, len(text.splitlines())), f"not valid TOML: {reason} (at the end of the file)")
    reason = message[: found.start()]
    return FileProblem(file, int(found.group(1)), f"not valid TOML: {reason} (column {found.group(2)})")


class _Reading:
    """One pass over a parsed document, collecting every problem with where it is."""

    def __init__(self) -> None:
        self.problems: list[RuleProblem] = []

    def problem(self, where: Where, message: str) -> None:
        self.problems.append(RuleProblem(where, message))

    def known_keys(self, table: Mapping[str, Any], where: Where, allowed: tuple[str, ...]) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"expected one of {', '.join(allowed)}"
                self.problem((*where, key), f"unknown key ({hint})")

    def rule_set(self, document: Mapping[str, Any]) -> RuleSet:
        self.known_keys(document, (), _TOP_KEYS)
        version = document.get("version")
        if "version" not in document:
            self.problem(("version",), f"missing: the file must begin with version = {FILE_VERSION}")
        elif version != FILE_VERSION or isinstance(version, bool):
            self.problem(("version",), f"{version!r} is not a version this release reads (version = {FILE_VERSION})")
        actions = document.get("actions", {})
        if not isinstance(actions, dict):
            self.problem(("actions",), "must be a table of actions ([actions.NAME])")
            return RuleSet()
        rules = {}
        for action, table in actions.items():
            rule = self.rule(action, table)
            if rule is not None:
                rules[action] = rule
        return RuleSet(rules)

    def rule(self, action: str, table: object) -> ReviewRule | None:
        where: Where = ("actions", action)
        if not isinstance(table, dict):
            self.problem(where, f"must be a table ([actions.{action}])")
            return None
        before = len(self.problems)
        self.known_keys(table, where, _RULE_KEYS)
        deadline = self.duration(table, (*where, "deadline"))
        distinct = table.get("distinct_across_stages", True)
        if not isinstance(distinct, bool):
            self.problem((*where, "distinct_across_stages"), "must be true or false")
            distinct = True
        elif not distinct:
            # A principal votes once per review (the votes table's key), so false could not do what it says.
            self.problem(
                (*where, "distinct_across_stages"),
                "false is not supported yet: a principal votes once per review, so counts in one stage only; "
                "leave the key out (true)",
            )
        stages, outline = self.stages(action, table.get("stages"), where)
        for problem in rule_problems(action, outline, deadline, distinct):
            self.problems += self._placed(problem, where, outline)
        if len(self.problems) > before or stages is None:
            return None
        return ReviewRule(action, tuple(stages), deadline, distinct)

    @staticmethod
    def _placed(problem: RuleProblem, where: Where, outline: list[tuple[str, timedelta | None]]) -> list[RuleProblem]:
        """The rule's own problem placed in the file; none when it repeats one reported already."""
        if problem.where == ("stages",) and not outline:
            return []  # no stages: reported with its hint by stages()
        if len(problem.where) == 3 and problem.where[2] == "name" and outline[int(problem.where[1])][0] == "":
            return []  # a faulty name, reported by stage(), is no duplicate
        if problem.where == ("action",):
            return [RuleProblem(where, problem.message)]
        return [RuleProblem((*where, *problem.where), problem.message)]

    def stages(
        self, action: str, value: object, where: Where
    ) -> tuple[list[Stage] | None, list[tuple[str, timedelta | None]]]:
        if value is None or value == []:
            self.problem(
                where if value is None else (*where, "stages"),
                f"needs at least one stage: add a [[actions.{action}.stages]] table",
            )
            return None, []
        if not isinstance(value, list) or not all(isinstance(stage, dict) for stage in value):
            self.problem((*where, "stages"), f"must be tables, each written [[actions.{action}.stages]]")
            return None, []
        stages: list[Stage] | None = []
        outline = []
        for index, table in enumerate(value):
            stage, name, due = self.stage(table, (*where, "stages", index))
            outline.append((name, due))
            if stage is None or stages is None:
                stages = None
            else:
                stages.append(stage)
        return stages, outline

    def stage(self, table: Mapping[str, Any], where: Where) -> tuple[Stage | None, str, timedelta | None]:
        """Read one stage; its name and due for the checks across stages (placeholders when they are faulty)."""
        self.known_keys(table, where, _STAGE_KEYS)
        faulty: set[str] = set()
        name = table.get("name")
        if not isinstance(name, str):
            self.problem(where if name is None else (*where, "name"), 'needs a name: name = "..."')
            faulty.add("name")
            name = ""
        groups = self.names(table, where, "groups", faulty)
        escalate_to = self.names(table, where, "escalate_to", faulty)
        approvals = self.count(table, where, "approvals", faulty)
        declines = self.count(table, where, "declines_to_end", faulty)
        before = len(self.problems)
        due = self.duration(table, (*where, "due"))
        if len(self.problems) > before:
            faulty.add("due")
            # A placeholder, so that escalate_to is not also told it lacks a due time.
            checked_due: timedelta | None = timedelta(seconds=1)
        else:
            checked_due = due
        model = stage_problems(name, groups, approvals, declines, checked_due, escalate_to)
        kept = [RuleProblem((*where, *p.where), p.message) for p in model if p.where[0] not in faulty]
        self.problems += kept
        if faulty or kept:
            return None, name, due
        return Stage(name, tuple(groups), approvals, declines, due, tuple(escalate_to)), name, due

    def names(self, table: Mapping[str, Any], where: Where, key: str, faulty: set[str]) -> list[str]:
        value = table.get(key, [])
        if isinstance(value, list):
            return value
        self.problem((*where, key), f'must be a list of group names: {key} = ["..."]')
        faulty.add(key)
        return []

    def count(self, table: Mapping[str, Any], where: Where, key: str, faulty: set[str]) -> int:
        value = table.get(key, 1)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        self.problem((*where, key), f"must be a whole number, not {value!r}")
        faulty.add(key)
        return 1

    def duration(self, table: Mapping[str, Any], where: Where) -> timedelta | None:
        value = table.get(str(where[-1]))
        if value is None:
            return None
        if not isinstance(value, str):
            self.problem(where, f'must be a duration in quotes, such as "4h", not {value!r}')
            return None
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.problem(where, str(exc))
            return None
