"""What the clients return: frozen dataclasses and string enums, never pb2 messages.

The enums and the receipt are the shared vocabulary (``decisionflow.vocabulary``), re-exported
here: members mirror the proto enums without their prefix (``OPERATION_STATE_COMMITTED`` is
``OperationState.COMMITTED``); a value a newer server sends that this client does not know
becomes the enum's UNSPECIFIED member (or, for an outcome, UNKNOWN).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from decisionflow.identity import EvidenceItem, PolicyRef
from decisionflow.vocabulary import (
    ApplyResult,
    Consistency,
    Decision,
    LookupStatus,
    OperationState,
    Outcome,
    Receipt,
    Role,
)

__all__ = [
    "AppliedEffect",
    "ApplyResult",
    "ApproveResult",
    "AttemptLease",
    "Caller",
    "Consistency",
    "Decision",
    "EditedProposal",
    "EffectRecord",
    "LookupAnswer",
    "LookupBatch",
    "LookupNote",
    "LookupStatus",
    "OperationPage",
    "OperationState",
    "OperationView",
    "Outcome",
    "PendingReviewEntry",
    "PendingReviewPage",
    "PendingReviewView",
    "ProposalRecord",
    "ProposalView",
    "Receipt",
    "RedriveResult",
    "ReviewProgress",
    "Role",
    "SettleResult",
    "Settlement",
    "StageTally",
    "StartedReview",
]


@dataclass(frozen=True, slots=True)
class AttemptLease:
    """Who holds an operation against other callers while an attempt's Apply may be in flight, and
    until when (a time past: the holder ended without releasing it; the next caller may drive)."""

    holder: str
    expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class LookupNote:
    """The last lookup recorded for an operation."""

    looked_up_at: datetime | None
    status: LookupStatus
    consistency: Consistency
    error: str


@dataclass(frozen=True, slots=True)
class StageTally:
    """One stage of a review under a rule, begun so far: who approved and declined it, and when it began,
    was due, was escalated and ended."""

    stage_index: int
    stage_name: str
    approvals_given: tuple[str, ...]
    """The principals whose approvals count in the stage, in the order given."""
    approvals_needed: int
    declines: tuple[str, ...]
    """The principals who declined in the stage, in the order given."""
    declines_to_end: int
    started_at: datetime | None
    due_time: datetime | None
    escalated_at: datetime | None
    """When the stage was escalated to its escalation groups; None when it was not."""
    ended_at: datetime | None
    """When the vote that completed or declined the stage was counted; None while it is being decided."""


@dataclass(frozen=True, slots=True)
class ReviewProgress:
    """Where a review under a rule other than the default one stands (docs/review-rules.md): its current
    stage (the last one once complete), who approved it and what it still needs."""

    stage_index: int
    """The current stage, 0 for the first."""
    stage_name: str
    stage_count: int
    approvals_given: tuple[str, ...]
    """The principals whose approvals count in the current stage, in the order given."""
    approvals_needed: int
    """How many approvals the current stage needs in all."""
    eligible_groups: tuple[str, ...]
    """The groups whose members may decide the current stage now; empty: any reviewer."""
    due_time: datetime | None
    escalated: bool
    deadline: datetime | None
    stages: tuple[StageTally, ...] = ()
    """Every stage begun so far, in the rule's order: the last is the current one; empty from an
    orchestrator of an earlier release."""


@dataclass(frozen=True, slots=True)
class OperationView:
    """An operation and where it stands."""

    operation_id: str
    case_id: str
    state: OperationState
    decision: Decision
    reviewer: str
    decided_at: datetime | None
    receipt: Receipt | None
    attempts: int
    first_attempt_at: datetime | None
    rejection_reason: str
    last_lookup: LookupNote | None
    updated_at: datetime | None
    # The lease of the attempt that last took the operation, while one is recorded.
    attempt_lease: AttemptLease | None = None
    # Where its review stands under its rule; None under the default rule (one approval by any reviewer).
    progress: ReviewProgress | None = None

    @property
    def receipt_id(self) -> str | None:
        """The receiver's receipt id once committed, else None."""
        return self.receipt.receipt_id if self.receipt is not None else None


@dataclass(frozen=True, slots=True)
class ProposalView:
    """An immutable proposal; operation_id is computed from its content."""

    operation_id: str
    case_id: str
    action: str
    body: str
    evidence: tuple[EvidenceItem, ...]
    evidence_id: str
    policy: PolicyRef
    policy_id: str
    human_edited: bool
    parent_operation_id: str
    created_by: str
    created_at: datetime | None
    current: bool


@dataclass(frozen=True, slots=True)
class PendingReviewView:
    """The workflow position a decision on operation_id resumes from."""

    operation_id: str
    workflow_name: str
    workflow_version: str
    graph_signature: str
    checkpoint_id: str
    created_at: datetime | None
    # Where its review stands under its rule (listed by list_pending_reviews); None under the default rule.
    progress: ReviewProgress | None = None


@dataclass(frozen=True, slots=True)
class PendingReviewEntry:
    """A case's current proposal waiting for a decision, its pending review, and how many proposals its
    chain of edits and replacements holds, itself included (1: never edited or replaced)."""

    proposal: ProposalView
    versions: int
    pending_review: PendingReviewView


@dataclass(frozen=True, slots=True)
class PendingReviewPage:
    """One page of pending reviews, oldest proposal first; next_page_token is empty on the last page.
    total_size: how many entries the filters match over every page, read with this page (None: not
    asked for, include_total_size)."""

    entries: tuple[PendingReviewEntry, ...]
    next_page_token: str
    total_size: int | None = None


@dataclass(frozen=True, slots=True)
class OperationPage:
    """One page of operations, oldest first; next_page_token is empty on the last page. total_size:
    how many operations the filters match over every page, read with this page (None: not asked
    for, include_total_size)."""

    operations: tuple[OperationView, ...]
    next_page_token: str
    total_size: int | None = None


@dataclass(frozen=True, slots=True)
class StartedReview:
    """A proposal and its pending review; created is False when the same content was started before."""

    proposal: ProposalView
    created: bool
    pending_review: PendingReviewView


@dataclass(frozen=True, slots=True)
class EditedProposal:
    """The new current proposal after an edit.

    pending_review is None only when a retried edit found its own earlier attempt had
    already succeeded (the reply was lost); the proposal is then read back from the server.
    """

    proposal: ProposalView
    pending_review: PendingReviewView | None


@dataclass(frozen=True, slots=True)
class ProposalRecord:
    """One proposal and its operation's state."""

    proposal: ProposalView
    operation: OperationView


@dataclass(frozen=True, slots=True)
class Caller:
    """Who the orchestrator takes the caller to be: its principal, every role granted to it and the
    groups it belongs to.

    What the roles allow is the orchestrator's policy (docs/security.md#roles), checked again on
    every call; a user interface reads them only to leave out what would be refused. The groups are
    those review rules name (from the credentials file, or the OIDC token's groups claim).
    """

    principal: str
    roles: frozenset[Role]
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ApproveResult:
    """The outcome of a decision; replay is True when the decision was already recorded."""

    outcome: Outcome
    replay: bool
    operation: OperationView


@dataclass(frozen=True, slots=True)
class AppliedEffect:
    """The receiver's answer to Apply; key_retention None means keys are kept forever."""

    result: ApplyResult
    receipt: Receipt
    key_retention: timedelta | None


@dataclass(frozen=True, slots=True)
class LookupAnswer:
    """What the receiver knows about one operation id."""

    operation_id: str
    status: LookupStatus
    receipt: Receipt | None
    consistency: Consistency
    observed_at: datetime | None


@dataclass(frozen=True, slots=True)
class LookupBatch:
    """Lookup answers in request order; key_retention None means keys are kept forever."""

    results: tuple[LookupAnswer, ...]
    key_retention: timedelta | None


@dataclass(frozen=True, slots=True)
class EffectRecord:
    """One written effect and its business record."""

    operation_id: str
    case_id: str
    kind: str
    payload_digest: str
    receipt: Receipt
    reviewer: str
    body: str


@dataclass(frozen=True, slots=True)
class Settlement:
    """What one lookup at the receiver showed, to be recorded by SettleOperation."""

    operation_id: str
    status: LookupStatus
    receipt: Receipt | None = None
    consistency: Consistency = Consistency.UNSPECIFIED
    observed_at: datetime | None = None
    error: str = ""

    @classmethod
    def from_lookup(cls, answer: LookupAnswer) -> Settlement:
        """Return the settlement that records a lookup answer as it was given."""
        return cls(answer.operation_id, answer.status, answer.receipt, answer.consistency, answer.observed_at)

    @classmethod
    def failed(cls, operation_id: str, error: str) -> Settlement:
        """Return the settlement that records a failed lookup (the operation stays open)."""
        return cls(operation_id, LookupStatus.UNSPECIFIED, error=error)


@dataclass(frozen=True, slots=True)
class SettleResult:
    """The operation after a lookup was recorded; settled is True when this call committed it."""

    operation: OperationView
    settled: bool


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """The outcome of a re-drive (COMMITTED, REJECTED or UNKNOWN) and the operation after it."""

    outcome: Outcome
    operation: OperationView
