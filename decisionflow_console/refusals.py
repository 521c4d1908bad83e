"""Every refusal and failure of a call to the orchestrator, said in words a reviewer or operator can
act on: what happened, what it means for the decision, and where to go next.

A refusal whose reason is declared with words of its own (``decisionflow.reasons.GUIDE``, ``words``:
stale, conflict, open proposal, not re-drivable, key retention, expired, four eyes, too many open
reviews, beyond the checkpoint) is said in them, its metadata filled in, with the HTTP status of its
gRPC status. Any other is said in the words of the class the client raises it as:

    error (decisionflow.client.errors)   page                                               HTTP
    PreconditionFailed (other reasons)   the orchestrator's message                          409
    QuotaExceeded                        too many or too large, too fast; try again in … s   429
    PermissionDenied                     your account lacks the role                         403
    Unauthenticated                      your sign-in is no longer accepted (link: sign in)  401
    NotFound                             no such operation or case                           404
    InvalidRequest                       the fields the orchestrator refused                 400
    Unavailable, DeadlineExceeded        the orchestrator is not answering                   503
    anything else                        the orchestrator failed                             502

The console decides none of this: each page says what the orchestrator answered, and which error each
refusal arrives as is the declaration's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import grpc

from decisionflow import reasons
from decisionflow.client import (
    DeadlineExceeded,
    DecisionflowError,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    QuotaExceeded,
    Unauthenticated,
    Unavailable,
)
from decisionflow.client.errors import error_class
from decisionflow_console.words import decision_in_words, state_in_words


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
    guide = reasons.GUIDE.get(error.reason)
    if guide is not None and guide.words is not None:
        said = _declared(error, guide.words)
    else:
        said = _words(error, _Asked(doing, role, deciding))
    return replace(said, reason=error.reason or error.code.name)


# The HTTP status of a page saying a refusal declared with words of its own, by its gRPC status.
_HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 503,
}
# Metadata values that are enum values on the wire, in words.
_VALUE_IN_WORDS: dict[str, Callable[[str], str]] = {
    reasons.RECORDED_DECISION: lambda value: decision_in_words(value.removeprefix("DECISION_")),
    reasons.STATE: lambda value: state_in_words(value.removeprefix("OPERATION_STATE_")),
}


class _Metadata(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "(not named)"  # a server that left the key out: the words still read


def _declared(error: DecisionflowError, words: reasons.Words) -> Refusal:
    metadata = _Metadata({key: _VALUE_IN_WORDS.get(key, str)(value) for key, value in error.metadata.items() if value})
    link = _proposal_link(error.metadata.get(words.link, ""), words.link_text) if words.link else None
    return Refusal(_HTTP_STATUS.get(error.code, 502), words.title, words.text.format_map(metadata), link=link)


# The words for each error the client raises, its most specific class first: a refusal declared without
# words of its own here (decisionflow.reasons) is said in the words of its status's class.
@functools.singledispatch
def _words(error: DecisionflowError, asked: _Asked) -> Refusal:
    return Refusal(502, "The orchestrator failed", error.message or error.reason or error.code.name)


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
    """Words that read nothing of the refusal."""

    status: int
    title: str
    words: str
    link: Link | None = None

    def __call__(self, error: DecisionflowError, asked: _Asked) -> Refusal:
        return Refusal(self.status, self.title, self.words, link=self.link)


_SAID: dict[type[DecisionflowError], _Said] = {
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


def _check_against_the_declaration() -> None:
    """The console has words only for what the client raises for a declared refusal or status (or a family
    of those): a class with words that no declared reason is raised as would be words nobody reads."""
    raised = {error_class(grpc.StatusCode[d.status], d.reason) for d in reasons.REFUSALS.values()}
    raised |= {error_class(grpc.StatusCode[rule.status], "") for rule in reasons.STATUS_RULES}
    for cls in _words.registry:
        if cls not in {object, DecisionflowError} and not any(issubclass(each, cls) for each in raised):
            raise TypeError(f"{__name__} has words for {cls.__name__}, which no declared refusal is raised as")


_check_against_the_declaration()
