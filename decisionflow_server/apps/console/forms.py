"""Proposal forms to the client's types and back: the body, evidence rows and policy fields a page
posts. Only the shape is checked here (a version is a whole number); the orchestrator judges the
content and its refusal is shown as it gives it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from decisionflow.client import EvidenceItem, PolicyRef, ProposalView

ACTION = "record_support_review"
# Empty rows a form offers below the proposal's evidence, for adding sources.
SPARE_ROWS = 2
# Rows read from a post at most; the orchestrator's own limit is lower.
MAX_ROWS = 64


class FormError(ValueError):
    """A field could not be read (its name and what it should be); nothing was sent."""


@dataclass(frozen=True, slots=True)
class EvidenceRow:
    """One evidence row as a form shows it (text, so a half-typed row can be shown again)."""

    source_id: str = ""
    version: str = ""
    quotation: str = ""


@dataclass(frozen=True, slots=True)
class ProposalForm:
    """The fields of a start or edit form."""

    case_id: str = ""
    action: str = ACTION
    body: str = ""
    evidence: tuple[EvidenceRow, ...] = field(default_factory=lambda: (EvidenceRow(),) * SPARE_ROWS)
    policy_name: str = "support-replies"
    policy_version_label: str = ""
    policy_allowance_units: str = "0"
    policy_rules: str = ""

    @classmethod
    def of(cls, proposal: ProposalView) -> ProposalForm:
        """Return the form showing proposal, with spare rows for more evidence."""
        rows = tuple(EvidenceRow(e.source_id, str(e.version), e.quotation) for e in proposal.evidence)
        rules = "\n".join(f"{key}={value}" for key, value in sorted(proposal.policy.rules.items()))
        return cls(
            case_id=proposal.case_id,
            action=proposal.action,
            body=proposal.body,
            evidence=rows + (EvidenceRow(),) * SPARE_ROWS,
            policy_name=proposal.policy.name,
            policy_version_label=proposal.policy.version_label,
            policy_allowance_units=str(proposal.policy.allowance_units),
            policy_rules=rules,
        )

    @classmethod
    def posted(cls, form: Mapping[str, object]) -> ProposalForm:
        """Return the form as posted (rows whose three fields are empty are dropped)."""

        def text(name: str) -> str:
            value = form.get(name, "")
            return value if isinstance(value, str) else ""

        rows = tuple(
            EvidenceRow(text(f"evidence-{i}-source_id"), text(f"evidence-{i}-version"), text(f"evidence-{i}-quotation"))
            for i in range(MAX_ROWS)
        )
        return cls(
            case_id=text("case_id").strip(),
            action=text("action").strip() or ACTION,
            body=text("body"),
            evidence=tuple(row for row in rows if row.source_id or row.version or row.quotation),
            policy_name=text("policy_name"),
            policy_version_label=text("policy_version_label"),
            policy_allowance_units=text("policy_allowance_units").strip(),
            policy_rules=text("policy_rules"),
        )

    def with_spare_rows(self) -> ProposalForm:
        """Return the form with spare evidence rows, to show again after a refusal."""
        return ProposalForm(
            self.case_id,
            self.action,
            self.body,
            self.evidence + (EvidenceRow(),) * SPARE_ROWS,
            self.policy_name,
            self.policy_version_label,
            self.policy_allowance_units,
            self.policy_rules,
        )

    def evidence_items(self) -> Sequence[EvidenceItem]:
        """Return the evidence rows as items; raise FormError for a version that is not a whole number."""
        items = []
        for index, row in enumerate(self.evidence, 1):
            version = _whole(row.version, f"evidence row {index}: version")
            items.append(EvidenceItem(row.source_id, version, row.quotation))
        return items

    def policy(self) -> PolicyRef:
        """Return the policy; raise FormError for an allowance that is not a whole number or a rule without '='."""
        rules: dict[str, str] = {}
        for number, line in enumerate(self.policy_rules.splitlines(), 1):
            if not line.strip():
                continue
            key, equals, value = line.partition("=")
            if not equals:
                raise FormError(f"policy rules, line {number}: expected key=value")
            rules[key.strip()] = value.strip()
        allowance = _whole(self.policy_allowance_units, "policy allowance units")
        return PolicyRef(self.policy_name, self.policy_version_label, allowance, rules)


def _whole(text: str, what: str) -> int:
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()):
        raise FormError(f"{what}: expected a whole number, not {text!r}")
    return int(digits)
