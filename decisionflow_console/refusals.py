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
    BeyondCheckpoint                     no signed checkpoint covers it yet; try again soon   409
    PreconditionFailed (other reasons)   the orchestrator's message                          409
    QuotaExceeded                        too many or too large, too fast; try again in … s   429
    FourEyes                             you created this proposal (or one it came from)     403
    PermissionDenied                     your account lacks the role                         403
    Unauthenticated                      your sign-in is no longer accepted (link: sign in)  401
    NotFound                             no such operation or case                           404
    InvalidRequest                       the fields the orchestrator refused                 400
    Unavailable, DeadlineExceeded        the orchestrator is not answering                   503
    anything else                        the orchestrator failed                             502

The console decides none of this: each page says what the orchestrator answered. Its words are its
own; which error each refusal arrives as is the declaration's (``decisionflow.reasons``), and a
refusal declared without words here is said in the words of its status's class.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import grpc

from decisionflow import reasons
from decisionflow.client import (
    BeyondCheckpoint,
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
from decisionflow.client.errors import error_class


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


@dataclass(frozen=True, slots=True)
class _Asked:
    """What the person was doing when the call failed, and the role it needs."""

    doing: str
    role: str
    deciding: bool


def explain(error: DecisionflowError, *, doing: str, role: str, deciding: bool = False) -> Refusal:
    """Return the words for error, raised while doing (for example "approve this proposal"), which
    needs role; deciding says a decision was being sent, so an indeterminate failure may have recorded it."""
    return replace(_words(error, _Asked(doing, role, deciding)), reason=error.reason or error.code.name)


# The words for each error the client raises, its most specific class first: a refusal declared without
# words of its own here (decisionflow.reasons) is said in the words of its status's class.
@functools.singledispatch
def _words(error: DecisionflowError, asked: _Asked) -> Refusal:
    return Refusal(502, "The orchestrator failed", error.message or error.reason or error.code.name)


@_words.register
def _stale(error: StaleProposal, asked: _Asked) -> Refusal:
    current = error.current_operation_id
    words = f"This proposal was replaced by {current or 'a newer one'} — open the current one."
    return Refusal(409, "This proposal was replaced", words, link=_proposal_link(current, "Open the current proposal"))


@_words.register
def _conflict(error: DecisionConflict, asked: _Asked) -> Refusal:
    recorded = error.recorded_decision.value.lower()
    words = f"A decision is already recorded for this operation: {recorded}. Decisions cannot be changed."
    return Refusal(409, "Already decided", words, link=_operation_link(error))


@_words.register
def _open_proposal(error: CaseHasOpenProposal, asked: _Asked) -> Refusal:
    current = error.current_operation_id
    words = (
        f"Case {error.case_id} already has a proposal waiting for review ({current}). Open it and edit it, "
        "or decide it first."
    )
    return Refusal(409, "This case has an open proposal", words, link=_proposal_link(current, "Open the open proposal"))


@_words.register
def _not_redrivable(error: NotRedrivable, asked: _Asked) -> Refusal:
    words = f"The operation is already settled (state {error.state.value}); there is nothing to re-drive."
    return Refusal(409, "Nothing to re-drive", words, link=_operation_link(error))


@_words.register
def _open_reviews(error: TooManyOpenReviews, asked: _Asked) -> Refusal:
    limit = "the most" if error.open_review_limit is None else str(error.open_review_limit)
    words = (
        f"You already have {limit} proposals waiting for review, the most one author may have. Nothing was "
        "changed. Try again once reviewers have decided some of them."
    )
    return Refusal(409, "Too many proposals waiting for review", words)


@_words.register
def _beyond_checkpoint(error: BeyondCheckpoint, asked: _Asked) -> Refusal:
    size = error.checkpoint_size
    latest = f"its latest covers {size} leaves" if size else "none is signed yet"
    words = (
        f"No checkpoint the audit log signed covers this yet ({latest}). The orchestrator signs one within an "
        "interval of its sequencer; try again in a moment."
    )
    return Refusal(409, "Not in a signed checkpoint yet", words)


@_words.register
def _precondition(error: PreconditionFailed, asked: _Asked) -> Refusal:
    return Refusal(409, "Refused by the orchestrator", error.message or error.reason or error.code.name)


@_words.register
def _quota(error: QuotaExceeded, asked: _Asked) -> Refusal:
    wait = "in a moment" if error.retry_after is None else f"in {max(1, math.ceil(error.retry_after))} s"
    words = f"You sent proposals faster, or larger, than one author may. Nothing was changed. Try again {wait}."
    return Refusal(429, "Too many proposals at once", words)


@_words.register
def _permission(error: PermissionDenied, asked: _Asked) -> Refusal:
    return missing_role(asked.doing, asked.role)


def missing_role(doing: str, role: str) -> Refusal:
    """Return the 403 refusal of a person without role (the orchestrator's, or the console's own page door)."""
    words = (
        f"You cannot {doing} here: your account does not have the {role} role. "
        "Roles come from your groups at the identity provider; ask whoever manages them."
    )
    return Refusal(403, f"You need the {role} role", words)


@_words.register
def _invalid(error: InvalidRequest, asked: _Asked) -> Refusal:
    details = tuple(f"{v.field}: {v.description}" for v in error.violations) or (error.message,)
    return Refusal(400, "The orchestrator refused the request", "Nothing was changed.", details=details)


@_words.register(Unavailable)
@_words.register(DeadlineExceeded)
def _not_answering(error: DecisionflowError, asked: _Asked) -> Refusal:
    words = "The orchestrator did not answer, even after a few tries."
    if asked.deciding:
        words += (
            " Your decision may or may not have been recorded. Sending it again is safe: it names the same "
            "operation id, so it is recorded once."
        )
    else:
        words += " Try again in a moment."
    return Refusal(503, "The orchestrator is not answering", words)


@dataclass(frozen=True, slots=True)
class _Said:
    """Words that read nothing of the refusal (but, with links_operation, its operation id)."""

    status: int
    title: str
    words: str
    link: Link | None = None
    links_operation: bool = False

    def __call__(self, error: DecisionflowError, asked: _Asked) -> Refusal:
        link = _operation_link(error) if self.links_operation else self.link
        return Refusal(self.status, self.title, self.words, link=link)


_SAID: dict[type[DecisionflowError], _Said] = {
    KeyRetentionExceeded: _Said(
        409,
        "Escalate: beyond the receiver's key retention",
        "The receiver refused the re-drive: the first attempt is older than its key retention, so a re-drive "
        "could write a second effect. Nothing was written. Never re-drive this operation; escalate it.",
        links_operation=True,
    ),
    ReviewExpired: _Said(
        409,
        "This review expired",
        "Nobody decided this proposal in time and an operator expired its review, so it can no longer be "
        "decided. Nothing was recorded. To ask for a review again, edit it.",
        links_operation=True,
    ),
    FourEyes: _Said(
        403,
        "You cannot decide your own proposal",
        "The four-eyes rule is on: nobody who created this proposal, or a proposal it was edited from or "
        "replaced, can decide it. Ask another reviewer.",
    ),
    Unauthenticated: _Said(
        401,
        "Sign in again",
        "The orchestrator did not accept your sign-in (it expired or was revoked). Sign in again.",
        Link("/login", "Sign in"),
    ),
    NotFound: _Said(404, "Not found", "The orchestrator knows no such operation or case."),
}
for _class, _said in _SAID.items():
    _words.register(_class, _said)


def _proposal_link(operation_id: str, text: str) -> Link | None:
    return Link(proposal_path(operation_id), text) if operation_id else None


def _operation_link(error: DecisionflowError) -> Link | None:
    return _proposal_link(error.operation_id, "Open the proposal")


def _check_against_the_declaration() -> None:
    """The console has words only for what the client raises for a declared refusal or status (or a family
    of those): a class with words that no declared reason is raised as would be words nobody reads."""
    raised = {error_class(grpc.StatusCode[d.status], d.reason) for d in reasons.REFUSALS.values()}
    raised |= {error_class(grpc.StatusCode[rule.status], "") for rule in reasons.STATUS_RULES}
    for cls in _words.registry:
        if cls not in {object, DecisionflowError} and not any(issubclass(each, cls) for each in raised):
            raise TypeError(f"{__name__} has words for {cls.__name__}, which no declared refusal is raised as")


_check_against_the_declaration()
