"""What does not hold when a review rule is built, decoded, loaded from a file or replayed.

    ReviewRuleError          base (a ValueError): the input is not a rule, or not a review under one
    ├── InvalidRule          problems: the values break the model's constraints (each problem names its field)
    ├── MalformedRule        the bytes or fields are not what ``encode_rule`` writes
    ├── RulesFileError       problems: the rules file is unreadable, not TOML or not a rule set (FILE:LINE each)
    └── InconsistentReview   vote_index, reason: recorded votes or escalations the rule would have refused

A file is refused with every problem at once, so one edit fixes them all; bytes are refused at the
first field that does not decode, since nothing after it can be trusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class ReviewRuleError(ValueError):
    """A review rule, its bytes, its file or a review under it does not hold; the subclass says what."""


@dataclass(frozen=True, slots=True)
class RuleProblem:
    """One broken constraint: where in the rule (``("stages", 1, "approvals")``) and what is wrong."""

    where: tuple[str | int, ...]
    message: str

    def __str__(self) -> str:
        return f"{dotted(self.where)}: {self.message}" if self.where else self.message


def dotted(where: Sequence[str | int]) -> str:
    """Return a path as a person reads it: ``stages[1].approvals``."""
    text = ""
    for part in where:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


class InvalidRule(ReviewRuleError):
    """The values break the model's constraints; problems lists each, naming its field."""

    def __init__(self, problems: Sequence[RuleProblem]) -> None:
        super().__init__("; ".join(str(problem) for problem in problems))
        self.problems = tuple(problems)


class MalformedRule(ReviewRuleError):
    """The bytes or fields are not a review rule exactly as ``encode_rule`` writes it."""


@dataclass(frozen=True, slots=True)
class FileProblem:
    """One problem of a rules file, at a line when one can be named (from 1)."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line is not None else f"{self.file}: {self.message}"


class RulesFileError(ReviewRuleError):
    """The rules file is refused; problems lists every fault found, each as ``FILE:LINE: message``."""

    def __init__(self, problems: Sequence[FileProblem]) -> None:
        super().__init__("\n".join(str(problem) for problem in problems))
        self.problems = tuple(problems)


class InconsistentReview(ReviewRuleError):
    """The recorded votes or escalations do not follow the rule; vote_index is the first vote refused (None
    when an escalation is at fault)."""

    def __init__(self, vote_index: int | None, reason: str) -> None:
        where = f"vote {vote_index}" if vote_index is not None else "escalation"
        super().__init__(f"{where}: {reason}")
        self.vote_index = vote_index
        self.reason = reason
