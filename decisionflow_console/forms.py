"""Proposal forms to the client's types and back: the body, evidence rows and policy fields a page
posts. Only the shape is checked here (a version is a whole number); the orchestrator judges the
content and its refusal is shown as it gives it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from decisionflow.client import EvidenceItem, PolicyRef, ProposalView

ACTION = "record_support_review"
# Empty rows a form offers below the proposal's evidence, for adding sources.
SPARE_ROWS = 2
# Rows read from a post at most; the orchestrator's own limit is lower.
MAX_ROWS = 64
_EVIDENCE_FIELD = re.compile(r"evidence\[(\d+)\]\.(source_id|version|quotation)")
_EVIDENCE_INPUT = re.compile(r"evidence-(\d+)-(source_id|version|quotation)")
_LABELS = {"body": "draft", "case_id": "case id"}


class FormError(ValueError):
    """A field could not be read (its name and what it should be); nothing was sent. field is the
    form's name for it, where the page says the problem."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def form_field(violation_field: str) -> str:
    """Return the form's name for a field the orchestrator names in a refusal (``evidence[0].version``
    is ``evidence-0-version``, ``policy.version_label`` is ``policy_version_label``)."""
    row = _EVIDENCE_FIELD.fullmatch(violation_field)
    if row is not None:
        return f"evidence-{row[1]}-{row[2]}"
    if violation_field.startswith("policy.rules"):
        return "policy_rules"
    return violation_field.replace(".", "_")


def field_label(name: str) -> str:
    """Return how a page names the form's field name (``evidence-0-version`` is "evidence row 1: version")."""
    row = _EVIDENCE_INPUT.fullmatch(name)
    if row is not None:
        return f"evidence row {int(row[1]) + 1}: {row[2].replace('_', ' ')}"
    return _LABELS.get(name, name.replace("_", " "))


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
            version = _whole(row.version, f"evidence-{index - 1}-version", f"evidence row {index}: version")
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
                raise FormError("policy_rules", f"policy rules, line {number}: expected key=value")
            rules[key.strip()] = value.strip()
        allowance = _whole(self.policy_allowance_units, "policy_allowance_units", "policy allowance units")
        return PolicyRef(self.policy_name, self.policy_version_label, allowance, rules)


def _whole(text: str, field_name: str, what: str) -> int:
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()):
        raise FormError(field_name, f"{what}: expected a whole number, not {text!r}")
    return int(digits)
