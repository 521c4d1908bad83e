"""Orchestrator use cases: start, edit, decide, re-drive, settle (docs/review-protocol.md, docs/reconciler.md).

The service receives validated domain values only; the gRPC edge parses and checks every field.

Approve checks, in order (docs/review-protocol.md): a decision is given (at the edge);
(authentication happened at the boundary); a recorded decision wins (same → replay,
different → conflict); the operation must be the case's current proposal and its review not
expired; the pending review must come from the running workflow graph; then the workflow resumes from its
checkpoint and the ``commit`` step records the decision once, records the attempt, and
calls the receiver with the operation id as key.

Under a review rule other than the default one, Approve is a vote (``_votes``): the effect is written
once the votes complete the rule.

Parts: ``_proposals`` (start, edit, read), ``_decisions`` (decide, commit, replay, drive), ``_votes``
(votes under a rule),
``_attempts`` (each attempt's budget and lease), ``_outcome_lines`` (what is logged of an outcome),
``_operations`` (the reconciler's API), ``_runs`` (workflow runs and their checkpoints).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from decisionflow_server.runtime.failpoints import Failpoints
from orchestrator.checkpoints import CheckpointSealer
from orchestrator.ports import EffectPort
from orchestrator.quotas import AuthorBudgets
from orchestrator.rules_in_force import RulesInForce
from orchestrator.service._attempts import AttemptBudget
from orchestrator.service._decisions import DecisionService
from orchestrator.service._operations import OperationService
from orchestrator.service._proposals import ProposalService, StartedReview
from orchestrator.service._runs import ReviewRuns
from orchestrator.store import AsyncOrchestratorStore, OrchestratorStore
from orchestrator.workflow import ReviewWorkflow

__all__ = [
    "AttemptBudget",
    "DecisionService",
    "OperationService",
    "OrchestratorService",
    "ProposalService",
    "StartedReview",
]


class OrchestratorService:
    """The orchestrator's use cases over one store, the review workflow and the receiver."""

    def __init__(
        self,
        store: OrchestratorStore,
        workflow: ReviewWorkflow,
        sealer: CheckpointSealer,
        effects: EffectPort,
        failpoints: Failpoints,
        clock: Callable[[], datetime],
        *,
        four_eyes: bool = False,
        rules: RulesInForce | None = None,
        attempt_budget: AttemptBudget,
        author_budgets: AuthorBudgets,
        on_budget_refused: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self.rules = RulesInForce() if rules is None else rules
        async_store = AsyncOrchestratorStore(store)
        runs = ReviewRuns(async_store, workflow, sealer, failpoints, clock)
        self.proposals = ProposalService(async_store, runs, clock, author_budgets, on_budget_refused, self.rules)
        self.decisions = DecisionService(
            async_store,
            runs,
            effects,
            failpoints,
            clock,
            four_eyes=four_eyes,
            attempt_budget=attempt_budget,
        )
        self.operations = OperationService(async_store, self.decisions, clock)
