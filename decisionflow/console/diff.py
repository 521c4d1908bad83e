"""What changed from the proposal a proposal replaced: a unified diff of the body, and the evidence
and policy changes that alter the operation id even when the text reads the same."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from decisionflow.client import ProposalView

# Lines of context around each change, as `diff -u` shows by default.
CONTEXT_LINES = 3


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
