"""Orchestrator domain: proposals, decisions, operation states and the receiver payload.

Frozen dataclasses and pure rules only; no gRPC, no SQLAlchemy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Generic, TypeVar

from decisionflow.identity import EvidenceItem, PolicyRef, normalise
from decisionflow.review_rules import ReviewProgress, ReviewRecord, ReviewRule, default_rule, review_progress
from decisionflow.vocabulary import (
    CaseId,
    Consistency,
    Decision,
    LookupStatus,
    OperationId,
    OperationState,
    Outcome,
    Receipt,
)
from decisionflow_server.foundation.payload import EffectPayload

SUPPORTED_ACTIONS = frozenset({"record_support_review"})
T = TypeVar("T")


def _utf8_bytes(*texts: str) -> int:
    return sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)


def content_bytes(body: str, evidence: Sequence[EvidenceItem], policy: PolicyRef) -> int:
    """Return the bytes of text a proposal's body, evidence and policy carry (UTF-8): what a caller's
    content budget is charged (orchestrator.quotas); numbers and field framing are not counted."""
    return _utf8_bytes(
        body,
        *(text for item in evidence for text in (item.source_id, item.quotation)),
        policy.name,
        policy.version_label,
        *(text for rule in policy.rules.items() for text in rule),
    )


@dataclass(frozen=True, slots=True)
class ProposalContent:
    """What a proposal says, before it has an identity."""

    case_id: CaseId
    action: str
    body: str
    evidence: tuple[EvidenceItem, ...]
    policy: PolicyRef

    @property
    def size_bytes(self) -> int:
        """The bytes of text this content carries: its case id, action, body, evidence and policy."""
        return _utf8_bytes(self.case_id, self.action) + content_bytes(self.body, self.evidence, self.policy)


@dataclass(frozen=True, slots=True)
class ProposalStart:
    """A StartReview: the content, and the case's current proposal it replaces, if it names one."""

    content: ProposalContent
    expected_operation_id: OperationId | None = None


def proposal_content(
    case_id: CaseId, action: str, body: str, evidence: Sequence[EvidenceItem], policy: PolicyRef
) -> ProposalContent:
    """Return content in the form its identity is computed from: body normalised, evidence by source_id."""
    ordered = tuple(sorted(evidence, key=lambda e: e.source_id))
    return ProposalContent(case_id, action, normalise(body), ordered, policy)


@dataclass(frozen=True, slots=True)
class ProposalEdit:
    """What an edit replaces in the case's current proposal (validated; normalised when applied).

    The case and the action stay those of the proposal being edited.
    """

    expected_operation_id: OperationId
    body: str
    evidence: tuple[EvidenceItem, ...]
    policy: PolicyRef

    def applied_to(self, parent: ProposalContent) -> ProposalContent:
        """Return the parent's content with this edit's body, evidence and policy."""
        return proposal_content(parent.case_id, parent.action, self.body, self.evidence, self.policy)

    @property
    def size_bytes(self) -> int:
        """The bytes of text this edit carries: its body, evidence and policy."""
        return content_bytes(self.body, self.evidence, self.policy)


@dataclass(frozen=True, slots=True)
class Proposal:
    """An immutable proposal under its operation identity."""

    operation_id: OperationId
    content: ProposalContent
    evidence_id: str
    policy_id: str
    human_edited: bool
    # The proposal this one replaced or was edited from (None: it replaced nothing).
    parent_operation_id: OperationId | None
    created_by: str
    created_at: datetime
    # Who created this proposal or any proposal in its chain of edits and replacements; the
    # four-eyes rule bars each of them from deciding it (see carry_authors).
    authors: frozenset[str]
    # The review rule in force for its action when it was recorded; None: the action's default rule
    # (also every proposal recorded before rules existed).
    rule: ReviewRule | None = None

    @property
    def case_id(self) -> CaseId:
        """The case this proposal answers."""
        return self.content.case_id

    def review_rule(self) -> ReviewRule:
        """Return the rule its review follows: the one captured with it, else its action's default rule."""
        return default_rule(self.content.action) if self.rule is None else self.rule

    def opening_progress(self) -> ReviewProgress:
        """Where its review stands when it opens: its rule's first stage begun at its start, no vote yet."""
        return review_progress(ReviewRecord(self.review_rule(), self.authors, self.created_at, (), ()), self.created_at)


def captured_rule(rule: ReviewRule) -> ReviewRule | None:
    """Return rule as a proposal captures it: None for its action's default rule (stored as no rule at all)."""
    return None if rule == default_rule(rule.action) else rule


def carry_authors(proposal: Proposal, parent: Proposal | None) -> Proposal:
    """Return the proposal with its authors as recorded: its creator and every author of its parent.

    Carried forward at each edit and each replacement, so an author stays an author of every
    proposal derived from their text however many hands it passes through.
    """
    inherited = frozenset() if parent is None else parent.authors
    return replace(proposal, authors=proposal.authors | inherited | {proposal.created_by})


def authors_to_json(authors: frozenset[str]) -> str:
    """Serialise a proposal's authors for storage, sorted."""
    return json.dumps(sorted(authors), ensure_ascii=False)


def authors_from_json(text: str) -> frozenset[str]:
    """Restore authors stored by authors_to_json."""
    return frozenset(str(author) for author in json.loads(text))


@dataclass(frozen=True, slots=True)
class PendingReview:
    """The workflow position a decision on one operation resumes from."""

    operation_id: OperationId
    workflow_name: str
    workflow_version: str
    graph_signature: str
    checkpoint_id: str
    created_at: datetime
    retired_checkpoint_id: str | None = None


@dataclass(frozen=True, slots=True)
class RecordedDecision:
    """A decision in the ledger; never changes once inserted."""

    operation_id: OperationId
    decision: Decision
    reviewer: str
    decided_at: datetime


@dataclass(frozen=True, slots=True)
class LookupNote:
    """The last lookup recorded for an operation."""

    looked_up_at: datetime
    status: LookupStatus
    consistency: Consistency
    error: str


@dataclass(frozen=True, slots=True)
class Operation:
    """An operation's state, decision and effect record."""

    operation_id: OperationId
    case_id: CaseId
    state: OperationState
    state_changed_at: datetime
    decision: RecordedDecision | None
    attempts: int
    first_attempt_at: datetime | None
    receipt: Receipt | None
    rejection_reason: str | None
    last_lookup: LookupNote | None
    payload: bytes | None
    payload_digest: str | None
    # Until when an attempt in flight holds the operation (None: no attempt holds it); a time past
    # means its holder ended without releasing it (a crash) and the next caller may drive.
    attempt_lease_until: datetime | None = None
    # The orchestrator process whose attempt took that lease (None with no lease).
    attempt_lease_holder: str | None = None
    # When an operator last moved its pending review to the rule in force (None: never).
    rerouted_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class FirstAttempt:
    """The first Apply attempt of an approval, recorded with its decision: payload, digest and lease."""

    payload: bytes
    payload_digest: str
    lease_until: datetime
    # The orchestrator process that takes the lease (None: not named).
    lease_holder: str | None = None


@dataclass(frozen=True, slots=True)
class ProposalView:
    """A proposal, its operation, and whether it is still the case's current proposal (one snapshot)."""

    proposal: Proposal
    operation: Operation
    current: bool
    # Where its review stands when it follows a rule other than the default one (read while it is pending).
    progress: ReviewProgress | None = None


@dataclass(frozen=True, slots=True)
class PendingReviewFilter:
    """Which pending reviews a listing returns: every filter that is set must match (None matches any)."""

    case_id: CaseId | None = None
    # Compared exactly, character for character: no pattern, no case folding.
    case_id_prefix: str | None = None
    created_by: str | None = None
    action: str | None = None


@dataclass(frozen=True, slots=True)
class PendingReviewEntry:
    """A case's current proposal, still undecided: its pending review, how many proposals its chain of
    edits and replacements holds (itself included), and since when it has waited (the listing's order)."""

    proposal: Proposal
    review: PendingReview
    versions: int
    pending_since: datetime
    # Where its review stands, when it follows a rule other than the default one (listed with progress).
    progress: ReviewProgress | None = None


@dataclass(frozen=True, slots=True)
class SealedCheckpoint:
    """One workflow checkpoint as stored: identifying columns, the seal and the pickled state."""

    checkpoint_id: str
    workflow_name: str
    graph_signature: str
    operation_id: OperationId
    created_at: datetime
    key_id: str
    mac: str
    state: bytes


@dataclass(frozen=True, slots=True)
class DecisionInputs:
    """What Approve reads before deciding, from one snapshot."""

    operation: Operation
    proposal: Proposal
    current_operation_id: OperationId | None
    review: PendingReview | None
    checkpoint: SealedCheckpoint | None


@dataclass(frozen=True, slots=True)
class Settlement:
    """What one lookup at the receiver showed, to be recorded for an operation."""

    operation_id: OperationId
    status: LookupStatus
    consistency: Consistency
    receipt: Receipt | None
    error: str
    looked_up_at: datetime


@dataclass(frozen=True, slots=True)
class RetentionRefusal:
    """The receiver refused an Apply first attempted beyond its key retention: escalate, never re-drive.

    Both values are as the receiver reported them (RFC 3339, and a duration such as "86400s").
    """

    first_attempted_at: str
    key_retention: str


@dataclass(frozen=True, slots=True)
class DecisionResult:
    """The outcome of Approve or a re-drive: the operation, its outcome, and whether it was a replay;
    retention_refusal is set when the outcome is Unknown because the receiver refused for its key retention."""

    operation: Operation
    outcome: Outcome
    replay: bool
    retention_refusal: RetentionRefusal | None = None
    # Where the review stands under its rule (None: the default rule, whose answers say nothing more).
    progress: ReviewProgress | None = None


def outcome_of(state: OperationState) -> Outcome:
    """Return the caller-facing outcome of a decided operation's state."""
    return {
        OperationState.COMMITTED: Outcome.COMMITTED,
        OperationState.DECLINED: Outcome.DECLINED,
        OperationState.REJECTED: Outcome.REJECTED,
    }.get(state, Outcome.UNKNOWN)


def effect_payload(proposal: Proposal, decision: RecordedDecision) -> tuple[bytes, str]:
    """Return the canonical receiver payload and its SHA-256 digest, built from stored rows only."""
    payload = EffectPayload(
        operation_id=proposal.operation_id,
        case_id=proposal.case_id,
        action=proposal.content.action,
        body=proposal.content.body,
        evidence_id=proposal.evidence_id,
        policy_id=proposal.policy_id,
        reviewer=decision.reviewer,
        decision=decision.decision.label,
        decided_at=decision.decided_at,
    )
    return payload.encode(), payload.digest()


def evidence_to_json(evidence: Sequence[EvidenceItem]) -> str:
    """Serialise evidence for storage, ordered by source_id."""
    items = sorted(evidence, key=lambda item: item.source_id)
    return json.dumps(
        [{"source_id": e.source_id, "version": e.version, "quotation": e.quotation} for e in items],
        ensure_ascii=False,
    )


def evidence_from_json(text: str) -> tuple[EvidenceItem, ...]:
    """Restore evidence stored by evidence_to_json."""
    return tuple(EvidenceItem(e["source_id"], int(e["version"]), e["quotation"]) for e in json.loads(text))


def policy_to_json(policy: PolicyRef) -> str:
    """Serialise a policy for storage."""
    return json.dumps(
        {
            "name": policy.name,
            "version_label": policy.version_label,
            "allowance_units": policy.allowance_units,
            "rules": dict(sorted(policy.rules.items())),
        },
        ensure_ascii=False,
    )


def policy_from_json(text: str) -> PolicyRef:
    """Restore a policy stored by policy_to_json."""
    raw = json.loads(text)
    return PolicyRef(raw["name"], raw["version_label"], int(raw["allowance_units"]), dict(raw["rules"]))


@dataclass(frozen=True, slots=True)
class Listing(Generic[T]):
    """One page of a listing, and how many rows its filters match across every page, read from the
    page's own snapshot (None: not counted)."""

    rows: tuple[T, ...]
    total_size: int | None


@dataclass(frozen=True, slots=True)
class OperationTally:
    """How many operations stand in each state, and when the oldest open one (APPROVED or UNKNOWN:
    its effect not confirmed) was decided, None when there is none."""

    by_state: dict[OperationState, int]
    oldest_open_decided_at: datetime | None
