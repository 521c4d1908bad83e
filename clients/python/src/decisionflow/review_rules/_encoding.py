"""A review rule's canonical bytes and digest (docs/review-rules.md, "Canonical bytes").

The fields are framed as identities frame theirs (docs/identities.md: each field's UTF-8 bytes
prefixed by its 4-byte big-endian length); numbers are decimal without sign or leading zeros:

    "decisionflow.review-rule.v1", action, deadline in seconds ("" for none),
    distinct_across_stages ("1" or "0"), number of stages, then for each stage in order:
    name, approvals, declines_to_end, due in seconds ("" for none),
    number of groups, the groups (code point order),
    number of escalation groups, the escalation groups (code point order)

The digest is ``rule-v1-`` and the lowercase hex SHA-256 of those bytes, as identities spell theirs.
``rule_fields``/``rule_from_fields`` give the same fields unframed, for a record (an audit leaf) that
carries a rule's fields after its own. Decoding refuses anything ``encode_rule`` would not have
written: an unknown domain, a count or number not written canonically, groups out of order or
repeated, a rule the model refuses, fields left over.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta

from decisionflow.identity import frame, unframe
from decisionflow.review_rules._durations import whole_seconds
from decisionflow.review_rules._errors import InvalidRule, MalformedRule
from decisionflow.review_rules._model import MAX_GROUPS, MAX_STAGES, ReviewRule, Stage

RULE_DOMAIN = "decisionflow.review-rule.v1"
RULE_PREFIX = "rule-v1-"
# Every number a valid rule frames is below a year in seconds (8 digits); twelve digits bound int().
_MAX_DIGITS = 12


def _seconds(duration: timedelta | None) -> str:
    return "" if duration is None else str(whole_seconds(duration))


def rule_fields(rule: ReviewRule) -> list[str]:
    """Return the rule's fields in canonical order, its domain first: what ``encode_rule`` frames."""
    fields = [RULE_DOMAIN, rule.action, _seconds(rule.deadline), "1" if rule.distinct_across_stages else "0"]
    fields.append(str(len(rule.stages)))
    for stage in rule.stages:
        fields += [stage.name, str(stage.approvals), str(stage.declines_to_end), _seconds(stage.due)]
        fields += [str(len(stage.groups)), *stage.groups, str(len(stage.escalate_to)), *stage.escalate_to]
    return fields


def encode_rule(rule: ReviewRule) -> bytes:
    """Return the rule's canonical bytes: the same rule always gives the same bytes, another rule other bytes."""
    return frame(rule_fields(rule))


def rule_digest(rule: ReviewRule) -> str:
    """Return ``rule-v1-`` and the lowercase hex SHA-256 of the rule's canonical bytes."""
    return RULE_PREFIX + hashlib.sha256(encode_rule(rule)).hexdigest()


class _Reader:
    """Fields taken in order from a start index; running out is refused."""

    def __init__(self, fields: Sequence[str], start: int) -> None:
        self.fields = fields
        self.index = start

    def take(self) -> str:
        if self.index >= len(self.fields):
            raise MalformedRule("the rule has fewer fields than its counts call for")
        self.index += 1
        return self.fields[self.index - 1]

    def number(self, what: str, at_most: int | None = None) -> int:
        text = self.take()
        if not (0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit()) or str(int(text)) != text:
            raise MalformedRule(f"{what} {text!r} is not a canonical non-negative decimal")
        if at_most is not None and int(text) > at_most:
            raise MalformedRule(f"{what} {text} is more than {at_most}")
        return int(text)

    def duration(self, what: str) -> timedelta | None:
        if self.index < len(self.fields) and self.fields[self.index] == "":
            self.index += 1
            return None
        return timedelta(seconds=self.number(what))

    def names(self, what: str) -> tuple[str, ...]:
        return tuple(self.take() for _ in range(self.number(f"number of {what}", MAX_GROUPS)))


def rule_from_fields(fields: Sequence[str], start: int = 0) -> tuple[ReviewRule, int]:
    """Return the rule whose fields begin at fields[start] and the index just after them; MalformedRule
    unless they are exactly what ``rule_fields`` returns for that rule."""
    reader = _Reader(fields, start)
    if reader.take() != RULE_DOMAIN:
        raise MalformedRule(f"not a {RULE_DOMAIN} rule")
    action, deadline = reader.take(), reader.duration("deadline")
    distinct = reader.take()
    if distinct not in ("1", "0"):
        raise MalformedRule(f"distinct_across_stages {distinct!r} is neither '1' nor '0'")
    stages = []
    for index in range(reader.number("number of stages", MAX_STAGES)):
        name = reader.take()
        approvals, declines = reader.number(f"stage {index} approvals"), reader.number(f"stage {index} declines")
        due = reader.duration(f"stage {index} due")
        groups, escalate_to = reader.names(f"stage {index} groups"), reader.names(f"stage {index} escalation groups")
        if list(groups) != sorted(groups) or list(escalate_to) != sorted(escalate_to):
            raise MalformedRule(f"stage {index} names its groups out of code point order")
        try:
            stages.append(Stage(name, groups, approvals, declines, due, escalate_to))
        except InvalidRule as exc:
            raise MalformedRule(f"stage {index} is not a valid stage: {exc}") from exc
    try:
        rule = ReviewRule(action, tuple(stages), deadline, distinct == "1")
    except InvalidRule as exc:
        raise MalformedRule(f"not a valid rule: {exc}") from exc
    return rule, reader.index


def decode_rule(data: bytes) -> ReviewRule:
    """Return the rule data encodes; MalformedRule unless data is exactly what ``encode_rule`` writes for it."""
    fields = unframe(data, MalformedRule)
    rule, end = rule_from_fields(fields)
    if end != len(fields):
        raise MalformedRule("the rule has more fields than its counts call for")
    # What the checks above cannot see (a CR that framing would have turned into LF) the bytes can.
    if encode_rule(rule) != data:
        raise MalformedRule("the rule is not written canonically")
    return rule
