"""Reading a posted form: every form handler reads its form here, so none is served without the check
of its CSRF token, and a form from a session that has ended is told apart from a forged one.

    the form                                                   the answer
    carries the live session's CSRF token                      served
    carries a CSRF token, and no session is live: it ended     401 "Your session has ended": nothing was
      (its access token expired, its lifetime passed, it         done; a link signs in again and comes back
      signed out in another tab)                                 to the page the form was sent from
    carries no token, or not the live session's                403 "Form refused" (it may be forged)

A forged form may carry a made-up token too: it then gets the sign-in link, which leads to a page of
this console and decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from decisionflow_console import csrf
from decisionflow_console.pages import Pages
from decisionflow_console.refusals import Link
from decisionflow_console.sessions import Session

# The page a form was sent from: a path, or a path read from the form (a decision's proposal).
SentFrom = str | Callable[[FormData], str]


async def posted_form(
    pages: Pages, request: Request, session: Session | None, sent_from: SentFrom = "/"
) -> tuple[Session, FormData] | Response:
    """The POST's session and form when the form carries the session's CSRF token; else the page that
    says why nothing was done: the session ended (sign in again, back to the page sent_from names) or
    the form was refused."""
    form = await request.form()
    submitted = form.get(csrf.FIELD)
    try:
        return csrf.check(session, submitted), form
    except csrf.CsrfRefused:
        if session is None and isinstance(submitted, str) and submitted:
            return session_ended(pages, request, sent_from if isinstance(sent_from, str) else sent_from(form))
        return forged(pages, request)


def session_ended(pages: Pages, request: Request, back: str) -> Response:
    """Return the 401 page of a form sent after its session ended, with a sign-in that returns to back."""
    return pages.message(
        request,
        401,
        "Your session has ended",
        "You were signed out (your sign-in expired) before this form was sent, so nothing was done. Sign in "
        "again: you will come back to the same page, where you can send it again.",
        Link("/login?" + urlencode({"next": back}), "Sign in again"),
    )


def forged(pages: Pages, request: Request) -> Response:
    """Return the 403 page of a POST without its session's CSRF token."""
    return pages.message(
        request,
        403,
        "Form refused",
        "This form did not come from your current session (it may be forged, or your session ended). "
        "Nothing was done. Open the page again and resubmit.",
    )
