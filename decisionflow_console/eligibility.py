"""Whether the signed-in person may decide a review under a rule now, said before they try.

The orchestrator decides every vote (docs/review-rules.md); the console only leaves out the Approve
and Decline buttons a vote would be refused for, with a line saying why. It reads what the proposal
page has: the review's progress (current stage), the proposal's author and the person's principal
and groups (GetCaller). A reason it cannot see (a vote in an earlier stage, a decline) is still
refused by the orchestrator, in the words of NOT_ELIGIBLE_TO_DECIDE or of a conflict.
"""

from __future__ import annotations

from decisionflow import reasons
from decisionflow.client import Caller, ProposalView, ReviewProgress

# The heading a refusal NOT_ELIGIBLE_TO_DECIDE is said with: the line starts with the same words.
_TITLE = reasons.GUIDE[reasons.NOT_ELIGIBLE_TO_DECIDE].words.title  # type: ignore[union-attr]


def why_not_decide(progress: ReviewProgress | None, proposal: ProposalView, caller: Caller) -> str | None:
    """Return why caller may not decide the review now, in words; None when the console offers the decision."""
    if progress is None:
        return None
    if caller.principal == proposal.created_by:
        return f"{_TITLE}: you are an author of this proposal, and an author never counts."
    if caller.principal in progress.approvals_given:
        return f"{_TITLE}: you approved this stage already; another reviewer it admits must decide it."
    eligible = progress.eligible_groups
    if eligible and not set(eligible).intersection(caller.groups):
        return (
            f"{_TITLE}: the stage {progress.stage_name} is decided by members of {', '.join(eligible)}, "
            "and you are in none of them."
        )
    return None
