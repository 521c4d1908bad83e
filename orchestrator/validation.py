"""Input bounds (docs/security.md): every refusal names the field, and nothing is written.

The gRPC edge runs these checks and hands the service validated domain values only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from decisionflow.errors import FieldViolation, InvalidRequest
from decisionflow.identity import EvidenceItem, PolicyRef
from decisionflow.vocabulary import CaseId, OperationId, case_id_violations, operation_id_violations
from orchestrator.domain import (
    SUPPORTED_ACTIONS,
    PendingReviewFilter,
    ProposalContent,
    ProposalEdit,
    ProposalStart,
    proposal_content,
)

SOURCE_ID = re.compile(r"\A[A-Za-z0-9._:/-]{1,128}\Z")
MAX_BODY_BYTES = 64 * 1024
MAX_QUOTATION_BYTES = 8 * 1024
MAX_EVIDENCE = 32
MAX_RULES = 32
MAX_INT = 2**63 - 1
MAX_SOURCE_ID_CHARS = 128  # ASCII, by SOURCE_ID
MAX_POLICY_NAME_BYTES = 128
MAX_VERSION_LABEL_BYTES = 64
MAX_RULE_KEY_BYTES = 64
MAX_RULE_VALUE_BYTES = 1024
MAX_CASE_ID_CHARS = 64  # ASCII, by decisionflow.vocabulary.CASE_ID_PATTERN
# The most text one valid proposal carries (ProposalContent.size_bytes), 366,869 bytes: a content
# budget smaller than this would refuse the largest valid proposal for ever (orchestrator.config).
MAX_CONTENT_BYTES = (
    MAX_CASE_ID_CHARS
    + max(len(action) for action in SUPPORTED_ACTIONS)
    + MAX_BODY_BYTES
    + MAX_EVIDENCE * (MAX_SOURCE_ID_CHARS + MAX_QUOTATION_BYTES)
    + MAX_POLICY_NAME_BYTES
    + MAX_VERSION_LABEL_BYTES
    + MAX_RULES * (MAX_RULE_KEY_BYTES + MAX_RULE_VALUE_BYTES)
)
MAX_PRINCIPAL_CHARS = 128  # the width of proposals.created_by, as the credentials file bounds a principal
MAX_PENDING_PAGE = 500
DEFAULT_PENDING_PAGE = 50


def _text(violations: list[FieldViolation], name: str, value: str, max_bytes: int, *, required: bool = True) -> None:
    if required and not value:
        violations.append(FieldViolation(name, "required"))
    elif len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        violations.append(FieldViolation(name, f"longer than {max_bytes} bytes"))
    elif "\x00" in value:
        violations.append(FieldViolation(name, "contains a NUL character"))


def check_operation_id(value: str, name: str = "operation_id") -> OperationId:
    """Return value as an operation id if it is shaped like one; refuse it otherwise."""
    violations = operation_id_violations(value, name)
    if violations:
        raise InvalidRequest(violations)
    return OperationId(value)


def start_content(
    case_id: str, action: str, body: str, evidence: Sequence[EvidenceItem], policy: PolicyRef | None
) -> ProposalContent:
    """Return the content of a new proposal, normalised; refuse it (naming every bad field) outside the bounds."""
    violations = content_violations(case_id, action, body, evidence, policy)
    if violations or policy is None:  # a missing policy is among the violations
        raise InvalidRequest(violations)
    return proposal_content(CaseId(case_id), action, body, evidence, policy)


def start_request(
    case_id: str,
    action: str,
    body: str,
    evidence: Sequence[EvidenceItem],
    policy: PolicyRef | None,
    expected_operation_id: str = "",
) -> ProposalStart:
    """Return a validated StartReview: its content and, when given, the proposal it replaces."""
    replaces = check_operation_id(expected_operation_id, "expected_operation_id") if expected_operation_id else None
    content = start_content(case_id, action, body, evidence, policy)
    return ProposalStart(content, replaces)


def edit_content(
    expected_operation_id: str, body: str, evidence: Sequence[EvidenceItem], policy: PolicyRef | None
) -> ProposalEdit:
    """Return an edit of the proposal expected_operation_id; refuse it (naming every bad field) outside the bounds."""
    expected = check_operation_id(expected_operation_id, "expected_operation_id")
    violations = content_violations(None, None, body, evidence, policy)
    if violations or policy is None:  # a missing policy is among the violations
        raise InvalidRequest(violations)
    return ProposalEdit(expected, body, tuple(evidence), policy)


def content_violations(
    case_id: str | None, action: str | None, body: str, evidence: Sequence[EvidenceItem], policy: PolicyRef | None
) -> list[FieldViolation]:
    """Return the violations of proposal content; case_id and action are None when not given (edits)."""
    violations: list[FieldViolation] = []
    if case_id is not None:
        violations += case_id_violations(case_id)
    if action is not None and action not in SUPPORTED_ACTIONS:
        violations.append(
            FieldViolation("action", f"unknown action; supported: {', '.join(sorted(SUPPORTED_ACTIONS))}")
        )
    _text(violations, "body", body, MAX_BODY_BYTES)
    if len(evidence) > MAX_EVIDENCE:
        violations.append(FieldViolation("evidence", f"more than {MAX_EVIDENCE} items"))
    else:
        seen: set[str] = set()
        for i, item in enumerate(evidence):
            if SOURCE_ID.match(item.source_id) is None:
                violations.append(FieldViolation(f"evidence[{i}].source_id", "must be 1 to 128 of [A-Za-z0-9._:/-]"))
            elif item.source_id in seen:
                violations.append(FieldViolation(f"evidence[{i}].source_id", "duplicate source_id"))
            seen.add(item.source_id)
            if item.version > MAX_INT:
                violations.append(FieldViolation(f"evidence[{i}].version", f"larger than {MAX_INT}"))
            _text(violations, f"evidence[{i}].quotation", item.quotation, MAX_QUOTATION_BYTES)
    if policy is None:
        violations.append(FieldViolation("policy", "required"))
    else:
        _text(violations, "policy.name", policy.name, MAX_POLICY_NAME_BYTES)
        _text(violations, "policy.version_label", policy.version_label, MAX_VERSION_LABEL_BYTES)
        if policy.allowance_units > MAX_INT:
            violations.append(FieldViolation("policy.allowance_units", f"larger than {MAX_INT}"))
        if len(policy.rules) > MAX_RULES:
            violations.append(FieldViolation("policy.rules", f"more than {MAX_RULES} rules"))
        for key, value in policy.rules.items():
            _text(violations, "policy.rules key", key, MAX_RULE_KEY_BYTES)
            _text(violations, f"policy.rules[{key[:64]!r}]", value, MAX_RULE_VALUE_BYTES, required=False)
    return violations


def pending_page_size(page_size: int) -> int:
    """Return the page size of a ListPendingReviews (0 means the default); refuse one outside 0 to the maximum."""
    if page_size < 0 or page_size > MAX_PENDING_PAGE:
        raise InvalidRequest([FieldViolation("page_size", f"must be 0 to {MAX_PENDING_PAGE}")])
    return page_size or DEFAULT_PENDING_PAGE


def pending_review_filter(
    case_id: str | None, case_id_prefix: str | None, created_by: str | None, action: str | None
) -> PendingReviewFilter:
    """Return the filters of a ListPendingReviews (None: not set); refuse them, naming every bad one.

    A filter set but empty is refused with the other bad shapes: only an unset field means "any".
    """
    violations: list[FieldViolation] = []
    if case_id is not None:
        violations += case_id_violations(case_id)
    if case_id_prefix is not None:
        violations += case_id_violations(case_id_prefix, "case_id_prefix")
    if case_id is not None and case_id_prefix is not None:
        violations.append(FieldViolation("case_id_prefix", "set at most one of case_id and case_id_prefix"))
    if created_by is not None and not (
        0 < len(created_by) <= MAX_PRINCIPAL_CHARS and created_by.isprintable() and created_by == created_by.strip()
    ):
        description = f"must be 1 to {MAX_PRINCIPAL_CHARS} printable characters without surrounding spaces"
        violations.append(FieldViolation("created_by", description))
    if action is not None and action not in SUPPORTED_ACTIONS:
        violations.append(
            FieldViolation("action", f"unknown action; supported: {', '.join(sorted(SUPPORTED_ACTIONS))}")
        )
    if violations:
        raise InvalidRequest(violations)
    return PendingReviewFilter(None if case_id is None else CaseId(case_id), case_id_prefix, created_by, action)
