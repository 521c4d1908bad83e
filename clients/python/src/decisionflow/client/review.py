"""ReviewClient and AsyncReviewClient: proposals, edits and decisions against the orchestrator's
ReviewService.

Both clients build the same requests and read the same responses (the functions below); only the
call differs: ``_calls.call`` on a ``grpc.Channel``, ``_calls.call_async`` on a ``grpc.aio.Channel``,
each with a deadline on every attempt, the named retry policy and the one mapping to typed errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

from decisionflow import vocabulary_wire as wire
from decisionflow.client import _convert as convert
from decisionflow.client._calls import AsyncClient, Client, call, call_async
from decisionflow.client._inbox import AsyncInbox, Inbox
from decisionflow.client.errors import DecisionflowError, StaleProposal
from decisionflow.client.events import AsyncEventsClient, EventsClient
from decisionflow.client.views import (
    ApproveResult,
    Caller,
    Decision,
    EditedProposal,
    OperationView,
    ProposalRecord,
    ProposalView,
    StartedReview,
)
from decisionflow.client.waiting import wait_for_outcome, wait_for_outcome_async
from decisionflow.identity import EvidenceItem, IdentityError, PolicyRef, identities
from decisionflow.v1 import review_pb2, review_pb2_grpc


def _start_request(
    case_id: str,
    action: str,
    body: str,
    evidence: Sequence[EvidenceItem],
    policy: PolicyRef,
    expected_operation_id: str | None,
) -> review_pb2.StartReviewRequest:
    return review_pb2.StartReviewRequest(
        case_id=case_id,
        action=action,
        body=body,
        evidence=convert.evidence_to_pb(evidence),
        policy=convert.policy_to_pb(policy),
        expected_operation_id=expected_operation_id or "",
    )


def _started(response: review_pb2.StartReviewResponse) -> StartedReview:
    return StartedReview(
        proposal=convert.proposal(response.proposal),
        created=response.created,
        pending_review=convert.pending_review(response.pending_review),
    )


def _get_proposal_request(operation_id: str | None, case_id: str | None) -> review_pb2.GetProposalRequest:
    if (operation_id is None) == (case_id is None):
        raise ValueError("give exactly one of operation_id and case_id")
    return review_pb2.GetProposalRequest(operation_id=operation_id or "", case_id=case_id or "")


def _proposal_record(response: review_pb2.GetProposalResponse) -> ProposalRecord:
    return ProposalRecord(convert.proposal(response.proposal), convert.operation(response.operation))


def _edit_request(
    expected_operation_id: str, body: str, evidence: Sequence[EvidenceItem], policy: PolicyRef
) -> review_pb2.EditProposalRequest:
    return review_pb2.EditProposalRequest(
        expected_operation_id=expected_operation_id,
        body=body,
        evidence=convert.evidence_to_pb(evidence),
        policy=convert.policy_to_pb(policy),
    )


def _edited(response: review_pb2.EditProposalResponse) -> EditedProposal:
    return EditedProposal(convert.proposal(response.proposal), convert.pending_review(response.pending_review))


def _may_be_own_edit(stale: StaleProposal) -> bool:
    # A retry after a lost reply finds its own edit current, so the server calls it stale.
    return stale.attempts > 1 and bool(stale.current_operation_id)


def _own_edit(
    current: ProposalView | None,
    expected_operation_id: str,
    body: str,
    evidence: Sequence[EvidenceItem],
    policy: PolicyRef,
) -> EditedProposal | None:
    """Return the edit when current is exactly the proposal this edit of expected_operation_id makes."""
    if current is None:
        return None
    try:
        mine = identities(current.case_id, current.action, body, evidence, policy)
    except IdentityError:
        return None
    if current.parent_operation_id != expected_operation_id or mine.operation_id != current.operation_id:
        return None
    return EditedProposal(current, pending_review=None)


def _approve_request(operation_id: str, decision: Decision) -> review_pb2.ApproveRequest:
    return review_pb2.ApproveRequest(operation_id=operation_id, decision=wire.decision_to_pb(decision))


def _approve_result(response: review_pb2.ApproveResponse) -> ApproveResult:
    return ApproveResult(
        outcome=wire.outcome_from_pb(response.outcome),
        replay=response.replay,
        operation=convert.operation(response.operation),
    )


def _get_operation_request(operation_id: str) -> review_pb2.GetOperationRequest:
    return review_pb2.GetOperationRequest(operation_id=operation_id)


def _operation(response: review_pb2.GetOperationResponse) -> OperationView:
    return convert.operation(response.operation)


class ReviewClient(Client, Inbox):
    """Synchronous client of ReviewService.

    Every call carries a deadline (``timeout`` per attempt, never beyond the policy's total
    time) and is retried under ``policy`` when the failure is transient; a failure that
    remains is raised as a ``decisionflow.client.errors`` type. Retrying is safe for every
    method: starting the same content returns the same proposal, a decision is bound to its
    operation id and replayed, and a retried edit recognises its own earlier success.
    """

    @cached_property
    def _stub(self) -> review_pb2_grpc.ReviewServiceStub:
        return review_pb2_grpc.ReviewServiceStub(self._channel)

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
        request = _start_request(case_id, action, body, evidence, policy, expected_operation_id)
        return _started(call(self._stub.StartReview, request, self._settings))

    def get_proposal(self, operation_id: str | None = None, case_id: str | None = None) -> ProposalRecord:
        """Return one proposal by operation id, or a case's current proposal; give exactly one of them."""
        request = _get_proposal_request(operation_id, case_id)
        return _proposal_record(call(self._stub.GetProposal, request, self._settings))

    def edit_proposal(
        self,
        expected_operation_id: str,
        body: str,
        evidence: Sequence[EvidenceItem],
        policy: PolicyRef,
    ) -> EditedProposal:
        """Replace the case's current proposal if expected_operation_id is still current, else StaleProposal."""
        request = _edit_request(expected_operation_id, body, evidence, policy)
        try:
            return _edited(call(self._stub.EditProposal, request, self._settings))
        except StaleProposal as stale:
            current = self._current_after(stale)
            recovered = _own_edit(current, expected_operation_id, body, evidence, policy)
            if recovered is None:
                raise
            return recovered

    def _current_after(self, stale: StaleProposal) -> ProposalView | None:
        if not _may_be_own_edit(stale):
            return None
        try:
            return self.get_proposal(operation_id=stale.current_operation_id).proposal
        except DecisionflowError:
            return None

    def decide(self, operation_id: str, decision: Decision) -> ApproveResult:
        """Record decision on exactly operation_id and return the outcome, which may be UNKNOWN.

        Retrying with the same operation id is safe: the server replays a recorded decision
        (``replay=True``) and re-drives an effect whose outcome is still unknown. An UNKNOWN
        outcome is returned, not raised: the decision stands and the effect's fate is settled
        later by a lookup (or by calling again).
        """
        return _approve_result(call(self._stub.Approve, _approve_request(operation_id, decision), self._settings))

    def approve(self, operation_id: str) -> ApproveResult:
        """Approve operation_id; safe to repeat with the same id (the server replays, one effect at most)."""
        return self.decide(operation_id, Decision.APPROVE)

    def decline(self, operation_id: str) -> ApproveResult:
        """Decline operation_id; no effect is ever written for it."""
        return self.decide(operation_id, Decision.DECLINE)

    def get_operation(self, operation_id: str) -> OperationView:
        """Return the state of one operation."""
        return _operation(call(self._stub.GetOperation, _get_operation_request(operation_id), self._settings))

    def get_caller(self) -> Caller:
        """Return who the orchestrator takes this client's credentials to be, with their roles and groups."""
        return convert.caller(call(self._stub.GetCaller, review_pb2.GetCallerRequest(), self._settings))

    def wait_for_outcome(self, operation_id: str, timeout: float) -> OperationView:
        """Return the operation as GetOperation answers it once it is settled (COMMITTED, DECLINED, REJECTED,
        EXPIRED or SUPERSEDED), waking on the event feed instead of polling; WaitTimedOut (a TimeoutError,
        with the last answer) after timeout seconds (decisionflow.client.events)."""
        settings = self._settings
        watcher = EventsClient(
            self._channel,
            timeout=settings.timeout,
            policy=settings.policy,
            sleep=settings.sleep,
            metadata=settings.metadata,
            clock=settings.clock,
        )
        return wait_for_outcome(self.get_operation, watcher, operation_id, timeout, settings.clock)


class AsyncReviewClient(AsyncClient, AsyncInbox):
    """asyncio client of ReviewService on a ``grpc.aio`` channel: the methods, deadlines, retry
    policy, typed errors and ``definite`` flag of ``ReviewClient``, awaited."""

    @cached_property
    def _stub(self) -> review_pb2_grpc.ReviewServiceAsyncStub:
        return review_pb2_grpc.ReviewServiceStub(self._channel)

    async def start_review(
        self,
        case_id: str,
        action: str,
        body: str,
        evidence: Sequence[EvidenceItem],
        policy: PolicyRef,
        *,
        expected_operation_id: str | None = None,
    ) -> StartedReview:
        """Record a proposal and open its pending review; the same content returns the same proposal
        (see ``ReviewClient.start_review``)."""
        request = _start_request(case_id, action, body, evidence, policy, expected_operation_id)
        return _started(await call_async(self._stub.StartReview, request, self._settings))

    async def get_proposal(self, operation_id: str | None = None, case_id: str | None = None) -> ProposalRecord:
        """Return one proposal by operation id, or a case's current proposal; give exactly one of them."""
        request = _get_proposal_request(operation_id, case_id)
        return _proposal_record(await call_async(self._stub.GetProposal, request, self._settings))

    async def edit_proposal(
        self,
        expected_operation_id: str,
        body: str,
        evidence: Sequence[EvidenceItem],
        policy: PolicyRef,
    ) -> EditedProposal:
        """Replace the case's current proposal if expected_operation_id is still current, else StaleProposal."""
        request = _edit_request(expected_operation_id, body, evidence, policy)
        try:
            return _edited(await call_async(self._stub.EditProposal, request, self._settings))
        except StaleProposal as stale:
            current = await self._current_after(stale)
            recovered = _own_edit(current, expected_operation_id, body, evidence, policy)
            if recovered is None:
                raise
            return recovered

    async def _current_after(self, stale: StaleProposal) -> ProposalView | None:
        if not _may_be_own_edit(stale):
            return None
        try:
            return (await self.get_proposal(operation_id=stale.current_operation_id)).proposal
        except DecisionflowError:
            return None

    async def decide(self, operation_id: str, decision: Decision) -> ApproveResult:
        """Record decision on exactly operation_id and return the outcome, which may be UNKNOWN
        (returned, not raised); retrying with the same operation id is safe."""
        request = _approve_request(operation_id, decision)
        return _approve_result(await call_async(self._stub.Approve, request, self._settings))

    async def approve(self, operation_id: str) -> ApproveResult:
        """Approve operation_id; safe to repeat with the same id (the server replays, one effect at most)."""
        return await self.decide(operation_id, Decision.APPROVE)

    async def decline(self, operation_id: str) -> ApproveResult:
        """Decline operation_id; no effect is ever written for it."""
        return await self.decide(operation_id, Decision.DECLINE)

    async def get_operation(self, operation_id: str) -> OperationView:
        """Return the state of one operation."""
        request = _get_operation_request(operation_id)
        return _operation(await call_async(self._stub.GetOperation, request, self._settings))

    async def get_caller(self) -> Caller:
        """Return who the orchestrator takes this client's credentials to be, with their roles and groups."""
        return convert.caller(await call_async(self._stub.GetCaller, review_pb2.GetCallerRequest(), self._settings))

    async def wait_for_outcome(self, operation_id: str, timeout: float) -> OperationView:
        """``ReviewClient.wait_for_outcome``, awaited."""
        settings = self._settings
        watcher = AsyncEventsClient(
            self._channel,
            timeout=settings.timeout,
            policy=settings.policy,
            sleep=settings.sleep,
            metadata=settings.metadata,
            clock=settings.clock,
            wait_for_ready=settings.wait_for_ready,
        )
        return await wait_for_outcome_async(self.get_operation, watcher, operation_id, timeout, settings.clock)
