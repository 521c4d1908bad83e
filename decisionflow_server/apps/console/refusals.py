"""Every refusal and failure of a call to the orchestrator, said in words a reviewer or operator can
act on: what happened, what it means for the decision, and where to go next.

    error (decisionflow.client.errors)   page                                               HTTP
    StaleProposal                        replaced by … — open the current one (link)         409
    DecisionConflict                     another decision is recorded; decisions are final   409
    CaseHasOpenProposal                  the case has an open proposal (link)                409
    NotRedrivable                        already settled, in state …                         409
    KeyRetentionExceeded                 never re-drive; escalate                            409
    ReviewExpired                        an operator expired it; edit it to ask again         409
    TooManyOpenReviews                   you have the most open proposals one author may      409
    PreconditionFailed (other reasons)   the orchestrator's message                          409
    QuotaExceeded                        too many or too large, too fast; try again in … s   429
    FourEyes                             you created this proposal (or one it came from)     403
    PermissionDenied                     your account lacks the role                         403
    Unauthenticated                      your sign-in is no longer accepted (link: sign in)  401
    NotFound                             no such operation or case                           404
    InvalidRequest                       the fields the orchestrator refused                 400
    Unavailable, DeadlineExceeded        the orchestrator is not answering                   503
    anything else                        the orchestrator failed                             502

The console decides none of this: each page says what the orchestrator answered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from decisionflow.client import (
    CaseHasOpenProposal,
    DeadlineExceeded,
    DecisionConflict,
    DecisionflowError,
    FourEyes,
    InvalidRequest,
    KeyRetentionExceeded,
    NotFound,
    NotRedrivable,
    PermissionDenied,
    PreconditionFailed,
    QuotaExceeded,
    ReviewExpired,
    StaleProposal,
    TooManyOpenReviews,
    Unauthenticated,
    Unavailable,
)


@dataclass(frozen=True, slots=True)
class Link:
    """Where to go next: a path in the console and its words."""

    href: str
    text: str


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refusal as a page shows it: title, explanation, the next step, and the HTTP status."""

    status: int
    title: str
    words: str
    reason: str = ""
    link: Link | None = None
    details: tuple[str, ...] = ()


def proposal_path(operation_id: str) -> str:
    """Return the console path of a proposal's page."""
    return f"/proposals/{operation_id}"


def explain(error: DecisionflowError, *, doing: str, role: str, deciding: bool = False) -> Refusal:
    """Return the words for error, raised while doing (for example "approve this proposal"), which
    needs role; deciding says a decision was being sent, so an indeterminate failure may have recorded it."""
    reason = error.reason or error.code.name
    if isinstance(error, StaleProposal):
        current = error.current_operation_id
        words = f"This proposal was replaced by {current or 'a newer one'} — open the current one."
        link = Link(proposal_path(current), "Open the current proposal") if current else None
        return Refusal(409, "This proposal was replaced", words, reason, link)
    if isinstance(error, DecisionConflict):
        recorded = error.recorded_decision.value.lower()
        words = f"A decision is already recorded for this operation: {recorded}. Decisions cannot be changed."
        return Refusal(409, "Already decided", words, reason, _operation_link(error))
    if isinstance(error, CaseHasOpenProposal):
        current = error.current_operation_id
        words = (
            f"Case {error.case_id} already has a proposal waiting for review ({current}). Open it and edit it, "
            "or decide it first."
        )
        link = Link(proposal_path(current), "Open the open proposal") if current else None
        return Refusal(409, "This case has an open proposal", words, reason, link)
    if isinstance(error, NotRedrivable):
        words = f"The operation is already settled (state {error.state.value}); there is nothing to re-drive."
        return Refusal(409, "Nothing to re-drive", words, reason, _operation_link(error))
    if isinstance(error, KeyRetentionExceeded):
        words = (
            "The receiver refused the re-drive: the first attempt is older than its key retention, so a re-drive "
            "could write a second effect. Nothing was written. Never re-drive this operation; escalate it."
        )
        return Refusal(409, "Escalate: beyond the receiver's key retention", words, reason, _operation_link(error))
    if isinstance(error, ReviewExpired):
        words = (
            "Nobody decided this proposal in time and an operator expired its review, so it can no longer be "
            "decided. Nothing was recorded. To ask for a review again, edit it."
        )
        return Refusal(409, "This review expired", words, reason, _operation_link(error))
    if isinstance(error, TooManyOpenReviews):
        limit = error.open_review_limit
        words = (
            f"You already have {limit if limit is not None else 'the most'} proposals waiting for review, the most "
            "one author may have. Nothing was changed. Try again once reviewers have decided some of them."
        )
        return Refusal(409, "Too many proposals waiting for review", words, reason)
    if isinstance(error, PreconditionFailed):
        return Refusal(409, "Refused by the orchestrator", error.message or reason, reason)
    if isinstance(error, QuotaExceeded):
        wait = "in a moment" if error.retry_after is None else f"in {max(1, math.ceil(error.retry_after))} s"
        words = f"You sent proposals faster, or larger, than one author may. Nothing was changed. Try again {wait}."
        return Refusal(429, "Too many proposals at once", words, reason)
    if isinstance(error, FourEyes):
        words = (
            "The four-eyes rule is on: nobody who created this proposal, or a proposal it was edited from or "
            "replaced, can decide it. Ask another reviewer."
        )
        return Refusal(403, "You cannot decide your own proposal", words, reason)
    if isinstance(error, PermissionDenied):
        words = (
            f"The orchestrator refused to let you {doing}: your account does not have the {role} role. Roles come "
            "from your groups at the identity provider; ask whoever manages them."
        )
        return Refusal(403, f"You need the {role} role", words, reason)
    if isinstance(error, Unauthenticated):
        words = "The orchestrator did not accept your sign-in (it expired or was revoked). Sign in again."
        return Refusal(401, "Sign in again", words, reason, Link("/login", "Sign in"))
    if isinstance(error, NotFound):
        words = "The orchestrator knows no such operation or case."
        return Refusal(404, "Not found", words, reason)
    if isinstance(error, InvalidRequest):
        details = tuple(f"{v.field}: {v.description}" for v in error.violations) or (error.message,)
        return Refusal(400, "The orchestrator refused the request", "Nothing was changed.", reason, details=details)
    if isinstance(error, Unavailable | DeadlineExceeded):
        words = "The orchestrator did not answer, even after a few tries."
        if deciding:
            words += (
                " Your decision may or may not have been recorded. Sending it again is safe: it names the same "
                "operation id, so it is recorded once."
            )
        else:
            words += " Try again in a moment."
        return Refusal(503, "The orchestrator is not answering", words, reason)
    return Refusal(502, "The orchestrator failed", error.message or reason, reason)


def _operation_link(error: DecisionflowError) -> Link | None:
    return Link(proposal_path(error.operation_id), "Open the proposal") if error.operation_id else None
