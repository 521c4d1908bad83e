"""Proposals: start a review, edit the current proposal, read proposals and operations.

StartReview and EditProposal spend the caller's budgets (orchestrator.quotas) before anything else:
one call and the content's bytes, replays included (a replay is still a call and its bytes). The cap
on open reviews is checked only when the call would add a proposal to the inbox, first on a read
before the workflow runs, then again in the transaction that records it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime

from decisionflow.identity import identities
from decisionflow.review_rules import ReviewProgress
from decisionflow.vocabulary import CaseId, OperationId
from decisionflow_server.runtime import tracing
from orchestrator.domain import (
    Listing,
    Operation,
    PendingReview,
    PendingReviewEntry,
    PendingReviewFilter,
    Proposal,
    ProposalContent,
    ProposalEdit,
    ProposalStart,
    ProposalView,
    captured_rule,
)
from orchestrator.errors import BudgetExceeded, NotFound, StaleProposal
from orchestrator.quotas import AuthorBudgets
from orchestrator.rules_in_force import RulesInForce
from orchestrator.service._runs import ReviewRuns
from orchestrator.store import EVERY_REVIEW, AsyncOrchestratorStore, InboxKey, Reader


def _started(created: bool) -> str:
    # The access line's outcome of StartReview and EditProposal: a new proposal, or the one stored.
    return "created" if created else "existing"


@dataclass(frozen=True, slots=True)
class StartedReview:
    """A proposal with its pending review; created is False when the same content existed."""

    proposal: Proposal
    review: PendingReview
    created: bool
    progress: ReviewProgress | None = None
    """Where its review stands under a rule other than the default one; None under the default rule."""


class ProposalService:
    """StartReview, EditProposal, GetProposal, GetOperation and ListPendingReviews over validated input."""

    def __init__(
        self,
        store: AsyncOrchestratorStore,
        runs: ReviewRuns,
        clock: Callable[[], datetime],
        budgets: AuthorBudgets,
        on_budget_refused: Callable[[str], None],
        rules: RulesInForce,
    ) -> None:
        self._store = store
        self._rules = rules
        self._runs = runs
        self._clock = clock
        self._budgets = budgets
        self._open_review_limit = budgets.limits.open_reviews
        # Told the reason of each budget refusal (metrics).
        self._on_budget_refused = on_budget_refused

    @contextmanager
    def _budget_refusals_told(self) -> Iterator[None]:
        try:
            yield
        except BudgetExceeded as refused:
            self._on_budget_refused(refused.reason)
            raise

    def _proposal(self, content: ProposalContent, parent: OperationId | None, author: str, *, edited: bool) -> Proposal:
        # The store adds the parent's authors as it records the proposal, in the same transaction.
        ids = identities(content.case_id, content.action, content.body, content.evidence, content.policy)
        return Proposal(
            ids.operation_id,
            content,
            ids.evidence_id,
            ids.policy_id,
            edited,
            parent,
            author,
            self._clock(),
            frozenset({author}),
            # The rule in force now: a rules file reloaded later does not change this review's rule.
            captured_rule(self._rules.rule_for(content.action)),
        )

    async def start_review(self, start: ProposalStart, author: str) -> StartedReview:
        """Record a proposal and open its pending review; the same content again returns the first proposal.

        New content never silently replaces an undecided proposal: it must name it (compare-and-set).
        A replacement records what it replaced as its parent (not human-edited) and, like an edit,
        carries its authors forward. The author's budgets are spent first; an author with the most open
        reviews allowed on other cases adds no more."""
        content = start.content
        with self._budget_refusals_told():
            self._budgets.admit(author, content.size_bytes)
            proposal = self._proposal(content, start.expected_operation_id, author, edited=False)
            tracing.annotate(operation_id=proposal.operation_id, case_id=content.case_id)
            # A replay is answered from the store; new content is refused early, before the workflow
            # runs, and the store decides again, atomically, when it records.
            existing = await self._store.start_inputs(
                proposal.operation_id,
                content.case_id,
                start.expected_operation_id,
                author=author,
                open_review_limit=self._open_review_limit,
            )
            if existing is not None:
                return await self._standing(StartedReview(*existing, False))
            review, saved = await self._runs.open_review(proposal)
            stored, created = await self._store.create_proposal(
                proposal, review, saved, start.expected_operation_id, open_review_limit=self._open_review_limit
            )
        if not created:
            review = await self._store.get_pending_review(stored.operation_id)
        # Said on the call's access line (one line per call), with the operation and case ids.
        tracing.annotate(operation_id=stored.operation_id, case_id=content.case_id, outcome=_started(created))
        return await self._standing(StartedReview(stored, review, created))

    async def edit_proposal(self, edit: ProposalEdit, editor: str) -> StartedReview:
        """Replace the case's current proposal if edit.expected_operation_id is still current; else refuse as stale.

        The editor's budgets are spent first; an editor with the most open reviews allowed on other cases
        puts no more in the inbox."""
        with self._budget_refusals_told():
            self._budgets.admit(editor, edit.size_bytes)
            expected = edit.expected_operation_id
            parent = await self._store.get_proposal(expected)
            current = await self._store.current_operation_id(parent.case_id)
            if current != expected:
                raise StaleProposal(expected, current or "")
            proposal = self._proposal(edit.applied_to(parent.content), expected, editor, edited=True)
            if proposal.operation_id == expected:
                return await self._standing(
                    StartedReview(parent, await self._store.get_pending_review(expected), False)
                )
            await self._store.check_open_reviews(editor, parent.case_id, self._open_review_limit)
            review, saved = await self._runs.open_review(proposal)
            stored = await self._store.create_edit(
                proposal, expected, review, saved, open_review_limit=self._open_review_limit
            )
        review = await self._store.get_pending_review(stored.operation_id)
        created = stored.operation_id == proposal.operation_id
        tracing.annotate(operation_id=stored.operation_id, case_id=parent.case_id, outcome=_started(created))
        return await self._standing(StartedReview(stored, review, created))

    async def _standing(self, started: StartedReview) -> StartedReview:
        """started with where its review stands under a rule other than the default one: a review just opened
        stands at its first stage with no vote (nothing read); one found existing is read (a statement more,
        only under such a rule)."""
        proposal = started.proposal
        if proposal.rule is None:
            return started
        if started.created:
            return replace(started, progress=proposal.opening_progress())
        _, progress = await self._store.operation_progress(proposal.operation_id, self._clock())
        return replace(started, progress=progress)

    async def get_proposal(self, operation_id: OperationId) -> ProposalView:
        """Return the proposal with that operation id, its operation and whether it is the case's current one."""
        return await self._with_progress(await self._store.proposal_view(operation_id))

    async def _with_progress(self, view: ProposalView) -> ProposalView:
        """Return view with its review's progress when it follows a rule other than the default one, pending
        or decided: who approved and declined at each stage (read in a transaction of its own; none more under
        the default rule)."""
        if view.proposal.rule is None:
            return view
        operation, progress = await self._store.operation_progress(view.proposal.operation_id, self._clock())
        return replace(view, operation=operation, progress=progress)

    async def current_proposal(self, case_id: CaseId) -> ProposalView:
        """Return the case's current proposal with its operation; raise NotFound for an unknown case."""
        current = await self._store.current_operation_id(case_id)
        if current is None:
            raise NotFound("case", case_id)
        return await self._with_progress(await self._store.proposal_view(current))

    async def get_operation(self, operation_id: OperationId) -> Operation:
        """Return the operation's state, decision, receipt and last lookup."""
        return await self._store.get_operation(operation_id)

    async def operation_progress(self, operation_id: OperationId) -> tuple[Operation, ReviewProgress | None]:
        """Return the operation and, when its review follows a rule other than the default one, where it stands."""
        return await self._store.operation_progress(operation_id, self._clock())

    async def list_pending_reviews(
        self,
        filters: PendingReviewFilter,
        limit: int,
        after: InboxKey | None,
        *,
        counted: bool = False,
        reader: Reader = EVERY_REVIEW,
    ) -> Listing[PendingReviewEntry]:
        """Return up to limit undecided current proposals matching filters that reader sees, in the inbox's
        order (escalated first, then by due time, then oldest first) after a page key, each under a rule with
        its progress now; counted: with how many reader sees over every page, from the page's snapshot."""
        return await self._store.pending_reviews_listing(
            filters, limit, after, counted=counted, reader=reader, now=self._clock()
        )
