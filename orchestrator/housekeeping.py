"""Operators' housekeeping: prune checkpoints of settled operations, expire abandoned reviews,
re-open pending reviews recorded under a workflow graph this release no longer runs, and re-route the
pending reviews of an action to the review rule in force.

Expiring moves an undecided current proposal whose case has not moved for a while to EXPIRED, a final
state without a decision: it leaves the reviewers' inbox and its author's open reviews
(orchestrator.quotas), an Approve of it is refused (REVIEW_EXPIRED), and an edit of it starts a new
review. Nothing is deleted.

Re-opening runs the current workflow's ``prepare`` step again for the same proposal; the
operation id depends only on the proposal, so it stays the same. The old checkpoint is
retired (kept in ``retired_checkpoint_id``) and never resumed.

Re-routing moves each pending review of an action that follows another rule, and on which nothing
was decided yet, to the rule the rules file gives the action (orchestrator.store._reroute); a review
with a vote or an escalation keeps its rule. Each move is its own transaction with its ``reroute``
leaf, so a run stopped half-way leaves every review on one rule or the other, and running it again
finishes the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from decisionflow.review_rules import ReviewRule
from decisionflow.vocabulary import OperationId
from orchestrator.checkpoints import CheckpointSealer, RunCheckpoints
from orchestrator.domain import PendingReview
from orchestrator.store import OrchestratorStore, RerouteOutcome, RerouteVisit
from orchestrator.workflow import ReviewTask, ReviewWorkflow

logger = logging.getLogger("decisionflow.orchestrator")


@dataclass(frozen=True, slots=True)
class ReopenReport:
    """What reopen_reviews found and did."""

    found: list[PendingReview]
    reopened: list[OperationId]
    skipped: list[OperationId]


# Reviews read per page while re-routing: each is then moved in a transaction of its own.
REROUTE_PAGE = 200


def reroute_reviews(
    store: OrchestratorStore,
    rule: ReviewRule,
    clock: Callable[[], datetime],
    *,
    dry_run: bool,
    progress: Callable[[int], None] = lambda _: None,
) -> list[RerouteVisit]:
    """Move (or, on a dry run, say which would move) every pending review of rule's action that follows
    another rule to rule; return what each review visited found, in operation id order. progress is told
    how many reviews were visited after each page."""
    visits: list[RerouteVisit] = []
    after: OperationId | None = None
    while page := store.reroute_candidates(rule, after, REROUTE_PAGE):
        for operation_id in page:
            visit = store.reroute(operation_id, rule, clock(), dry_run=dry_run)
            visits.append(visit)
            if visit.outcome is RerouteOutcome.REROUTED and not dry_run:
                logger.info(
                    "pending review of %s re-routed to the rule in force",
                    rule.action,
                    extra={"operation_id": operation_id, "case_id": visit.case_id},
                )
        after = page[-1]
        progress(len(visits))
    return visits


def prune_checkpoints(store: OrchestratorStore, older_than: timedelta, now: datetime, *, dry_run: bool) -> int:
    """Delete (or count, on a dry run) checkpoints of operations settled more than older_than ago."""
    return store.housekeeping.prune_checkpoints(now - older_than, dry_run=dry_run)


def expire_reviews(store: OrchestratorStore, older_than: timedelta, now: datetime, *, dry_run: bool) -> int:
    """Expire (or count, on a dry run) the undecided reviews whose case has not moved for older_than."""
    expired = store.housekeeping.expire_reviews(now - older_than, now, dry_run=dry_run)
    if expired and not dry_run:
        logger.info("expired %d undecided reviews whose case had not moved for %s", expired, older_than)
    return expired


async def reopen_reviews(
    store: OrchestratorStore,
    workflow: ReviewWorkflow,
    sealer: CheckpointSealer,
    clock: Callable[[], datetime],
    *,
    dry_run: bool,
) -> ReopenReport:
    """Re-open every undecided pending review recorded under another workflow graph, under this one."""
    running = workflow.identity
    housekeeping = store.housekeeping
    found = await asyncio.to_thread(
        housekeeping.reviews_outside, running.name, running.version, running.graph_signature
    )
    reopened: list[OperationId] = []
    skipped: list[OperationId] = []
    if dry_run:
        return ReopenReport(found, reopened, skipped)
    for old in found:
        proposal = await asyncio.to_thread(store.get_proposal, old.operation_id)
        run = RunCheckpoints(store.checkpoints, sealer, old.operation_id, clock)
        checkpoint_id = await workflow.open(ReviewTask(proposal.operation_id, proposal.case_id), run)
        if run.save_error is not None:
            raise RuntimeError(f"checkpoint save failed while re-opening {old.operation_id}") from run.save_error
        new = PendingReview(
            old.operation_id, running.name, running.version, running.graph_signature, checkpoint_id, clock()
        )
        if await asyncio.to_thread(housekeeping.reopen, old, new, run.take_pending(checkpoint_id)):
            reopened.append(old.operation_id)
            logger.info(
                "pending review re-opened under %s (retired checkpoint %s)",
                running.label(),
                old.checkpoint_id,
                extra={"operation_id": old.operation_id, "case_id": proposal.case_id},
            )
        else:
            skipped.append(old.operation_id)
    return ReopenReport(found, reopened, skipped)
