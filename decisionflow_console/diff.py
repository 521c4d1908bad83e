"""What changed from the proposal a proposal replaced: a unified diff of the body, and the evidence
and policy changes that alter the operation id even when the text reads the same."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from decisionflow.client import ProposalView

# Lines of context around each change, as `diff -u` shows by default.
CONTEXT_LINES = 3


# Words and the spaces between them: a changed word is marked alone, the spaces around it are not.
_WORDS = re.compile(r"\s+|[^\s]+")


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of one diff line's text, and whether it differs from the paired line's."""

    text: str
    changed: bool


@dataclass(frozen=True, slots=True)
class DiffLine:
    """One line of the body's diff: its mark ("+", "-", " ", or "@" for a header) and its text in segments."""

    mark: str
    segments: tuple[Segment, ...]


@dataclass(frozen=True, slots=True)
class ProposalDiff:
    """The changes from parent to proposal; empty tuples mean that part is unchanged."""

    parent_operation_id: str
    body_lines: tuple[str, ...]
    evidence_changes: tuple[str, ...]
    policy_changes: tuple[str, ...]

    @property
    def body_changed(self) -> bool:
        """True when the body's text differs."""
        return bool(self.body_lines)

    @property
    def word_lines(self) -> tuple[DiffLine, ...]:
        """The body's diff with, in each removed line and the added line that replaced it, the words that differ."""
        return word_diff(self.body_lines)


def word_diff(unified: tuple[str, ...]) -> tuple[DiffLine, ...]:
    """Return a unified diff's lines, each removed line paired with the added line in its place (in order)
    and split into the words they share and the words that differ."""
    out: list[DiffLine] = []
    i = 0
    while i < len(unified):
        line = unified[i]
        if line.startswith(("---", "+++", "@@")) or not line.startswith(("-", "+")):
            mark = "@" if line.startswith(("---", "+++", "@@")) else " "
            out.append(DiffLine(mark, (Segment(line if mark == "@" else line[1:], False),)))
            i += 1
            continue
        removed = []
        while i < len(unified) and unified[i].startswith("-") and not unified[i].startswith("---"):
            removed.append(unified[i][1:])
            i += 1
        added = []
        while i < len(unified) and unified[i].startswith("+") and not unified[i].startswith("+++"):
            added.append(unified[i][1:])
            i += 1
        pairs = min(len(removed), len(added))
        paired = [_pair(removed[n], added[n]) for n in range(pairs)]
        out += [DiffLine("-", old) for old, _ in paired] + [DiffLine("-", (Segment(t, True),)) for t in removed[pairs:]]
        out += [DiffLine("+", new) for _, new in paired] + [DiffLine("+", (Segment(t, True),)) for t in added[pairs:]]
    return tuple(out)


def _pair(old: str, new: str) -> tuple[tuple[Segment, ...], tuple[Segment, ...]]:
    a, b = _WORDS.findall(old), _WORDS.findall(new)
    before: list[Segment] = []
    after: list[Segment] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if i2 > i1:
            before.append(Segment("".join(a[i1:i2]), tag != "equal"))
        if j2 > j1:
            after.append(Segment("".join(b[j1:j2]), tag != "equal"))
    return tuple(before), tuple(after)


def proposal_diff(parent: ProposalView, proposal: ProposalView) -> ProposalDiff:
    """Return what changed from parent to proposal, each line plain text for the page to escape."""
    body = difflib.unified_diff(
        parent.body.splitlines(),
        proposal.body.splitlines(),
        fromfile=parent.operation_id,
        tofile=proposal.operation_id,
        n=CONTEXT_LINES,
        lineterm="",
    )
    return ProposalDiff(
        parent.operation_id, tuple(body), _evidence_changes(parent, proposal), _policy_changes(parent, proposal)
    )


def _evidence_changes(parent: ProposalView, proposal: ProposalView) -> tuple[str, ...]:
    before = {item.source_id: item for item in parent.evidence}
    after = {item.source_id: item for item in proposal.evidence}
    changes: list[str] = []
    for source_id in sorted(before.keys() | after.keys()):
        old, new = before.get(source_id), after.get(source_id)
        if old is None and new is not None:
            changes.append(f"{source_id}: added at version {new.version}")
        elif new is None and old is not None:
            changes.append(f"{source_id}: removed (was version {old.version})")
        elif old is not None and new is not None:
            if old.version != new.version:
                changes.append(f"{source_id}: version {old.version} → {new.version}")
            if old.quotation != new.quotation:
                changes.append(f"{source_id}: quotation changed")
    return tuple(changes)


def _policy_changes(parent: ProposalView, proposal: ProposalView) -> tuple[str, ...]:
    old, new = parent.policy, proposal.policy
    changes: list[str] = []
    if (old.name, old.version_label) != (new.name, new.version_label):
        changes.append(f"policy {old.name} {old.version_label} → {new.name} {new.version_label}")
    if old.allowance_units != new.allowance_units:
        changes.append(f"allowance {old.allowance_units} → {new.allowance_units} units")
    before, after = dict(old.rules), dict(new.rules)
    for key in sorted(before.keys() | after.keys()):
        if key not in before:
            changes.append(f"rule {key} = {after[key]} added")
        elif key not in after:
            changes.append(f"rule {key} = {before[key]} removed")
        elif before[key] != after[key]:
            changes.append(f"rule {key}: {before[key]} → {after[key]}")
    return tuple(changes)
