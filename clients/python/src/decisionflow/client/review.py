"""ReviewClient: proposals, edits and decisions against the orchestrator's ReviewService."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import grpc

from decisionflow.client import _convert as convert
from decisionflow.client._calls import CallSettings, call, metadata_tuple
from decisionflow.client.errors import DecisionflowError, StaleProposal
from decisionflow.client.views import (
    ApproveResult,
    Decision,
    EditedProposal,
    OperationView,
    ProposalRecord,
    StartedReview,
)
from decisionflow.identity import EvidenceItem, IdentityError, PolicyRef, identities
from decisionflow.retry import CLIENT_DEFAULT, Clock, RetryPolicy
from decisionflow.v1 import review_pb2, review_pb2_grpc


class ReviewClient:
    """Synchronous client of ReviewService.

    Every call carries a deadline (``timeout`` per attempt, never beyond the policy's total
    time) and is retried under ``policy`` when the failure is transient; a failure that
    remains is raised as a ``decisionflow.client.errors`` type. Retrying is safe for every
    method: starting the same content returns the same proposal, a decision is bound to its
    operation id and replayed, and a retried edit recognises its own earlier success.
    """

    def __init__(
        self,
        channel: grpc.Channel,
        *,
        timeout: float = 5.0,
        policy: RetryPolicy = CLIENT_DEFAULT,
        sleep: Callable[[float], None] = time.sleep,
        metadata: Sequence[tuple[str, str | bytes]] = (),
        clock: Clock = time.monotonic,
    ) -> None:
        self._stub = review_pb2_grpc.ReviewServiceStub(channel)
        self._settings = CallSettings(timeout, policy, metadata_tuple(metadata), sleep, clock)

    def start_review(
        self,
        case_id: str,
        action: str,
        body: str,
        evidence: Sequence[EvidenceItem],
        policy: PolicyRef,
        *,
        expected_operation_id: str | None = None,
    ) -> StartedReview:
        """Record a proposal and open its pending review; the same content returns the same proposal.

        While the case's current proposal is undecided, other content is refused with
        CaseHasOpenProposal unless expected_operation_id names that proposal (then it is replaced by
        compare-and-set; StaleProposal if it is no longer current)."""
        request = review_pb2.StartReviewRequest(
            case_id=case_id,
            action=action,
            body=body,
            evidence=convert.evidence_to_pb(evidence),
            policy=convert.policy_to_pb(policy),
            expected_operation_id=expected_operation_id or "",
        )
        response = call(self._stub.StartReview, request, self._settings)
        return StartedReview(
            proposal=convert.proposal(response.proposal),
            created=response.created,
            pending_review=convert.pending_review(response.pending_review),
        )

    def get_proposal(self, operation_id: str | None = None, case_id: str | None = None) -> ProposalRecord:
        """Return one proposal by operation id, or a case's current proposal; give exactly one of them."""
        if (operation_id is None) == (case_id is None):
            raise ValueError("give exactly one of operation_id and case_id")
        request = review_pb2.GetProposalRequest(operation_id=operation_id or "", case_id=case_id or "")
        response = call(self._stub.GetProposal, request, self._settings)
        return ProposalRecord(convert.proposal(response.proposal), convert.operation(response.operation))

    def edit_proposal(
        self,
        expected_operation_id: str,
        body: str,
        evidence: Sequence[EvidenceItem],
        policy: PolicyRef,
    ) -> EditedProposal:
        """Replace the case's current proposal if expected_operation_id is still current, else StaleProposal."""
        request = review_pb2.EditProposalRequest(
            expected_operation_id=expected_operation_id,
            body=body,
            evidence=convert.evidence_to_pb(evidence),
            policy=convert.policy_to_pb(policy),
        )
        try:
            response = call(self._stub.EditProposal, request, self._settings)
        except StaleProposal as stale:
            # A retry after a lost reply finds its own edit current, so the server calls it stale.
            if stale.attempts > 1:
                recovered = self._own_edit(stale, expected_operation_id, body, evidence, policy)
                if recovered is not None:
                    return recovered
            raise
        return EditedProposal(convert.proposal(response.proposal), convert.pending_review(response.pending_review))

    def _own_edit(
        self,
        stale: StaleProposal,
        expected_operation_id: str,
        body: str,
        evidence: Sequence[EvidenceItem],
        policy: PolicyRef,
    ) -> EditedProposal | None:
        if not stale.current_operation_id:
            return None
        try:
            current = self.get_proposal(operation_id=stale.current_operation_id).proposal
            mine = identities(current.case_id, current.action, body, evidence, policy)
        except (DecisionflowError, IdentityError):
            return None
        if current.parent_operation_id != expected_operation_id or mine.operation_id != current.operation_id:
            return None
        return EditedProposal(current, pending_review=None)

    def decide(self, operation_id: str, decision: Decision) -> ApproveResult:
        """Record decision on exactly operation_id and return the outcome, which may be UNKNOWN.

        Retrying with the same operation id is safe: the server replays a recorded decision
        (``replay=True``) and re-drives an effect whose outcome is still unknown. An UNKNOWN
        outcome is returned, not raised: the decision stands and the effect's fate is settled
        later by a lookup (or by calling again).
        """
        request = review_pb2.ApproveRequest(operation_id=operation_id, decision=convert.decision_to_pb(decision))
        response = call(self._stub.Approve, request, self._settings)
        return ApproveResult(
            outcome=convert.outcome(response.outcome),
            replay=response.replay,
            operation=convert.operation(response.operation),
        )

    def approve(self, operation_id: str) -> ApproveResult:
        """Approve operation_id; safe to repeat with the same id (the server replays, one effect at most)."""
        return self.decide(operation_id, Decision.APPROVE)

    def decline(self, operation_id: str) -> ApproveResult:
        """Decline operation_id; no effect is ever written for it."""
        return self.decide(operation_id, Decision.DECLINE)

    def get_operation(self, operation_id: str) -> OperationView:
        """Return the state of one operation."""
        response = call(
            self._stub.GetOperation, review_pb2.GetOperationRequest(operation_id=operation_id), self._settings
        )
        return convert.operation(response.operation)
