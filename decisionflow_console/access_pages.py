"""Where each person lands, and the door of each page: the console's root sends a signed-in person to
their role's own page (``access.LANDINGS``), or to a page that says what the roles are and whom to ask
when they have none; a page opened by someone whose roles the orchestrator's policy does not admit to
its call answers 403 and the missing role, before any form is shown (``access``).

A person whose roles the orchestrator did not say (it was not answering) is let through: the page's
own call is then refused or served by the orchestrator, and the roles are asked again on the next
request (``navigation.CallerRoles``). A page that calls no orchestrator (the relay's position) has no
call to refuse that person, so its door is ``guarded``: it opens only once the roles are known.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from decisionflow_console.access import Use, landing
from decisionflow_console.pages import Pages
from decisionflow_console.refusals import Link, missing_role
from decisionflow_console.review_pages import signed_in

Endpoint = Callable[[Request], Awaitable[Response]]


class AccessPages:
    """The landing page, and the gate in front of every page that needs a role."""

    def __init__(self, pages: Pages) -> None:
        self._pages = pages

    async def land(self, request: Request) -> Response:
        """Send a signed-in person to their role's page (the query string goes along); welcome anyone else."""
        session = signed_in(request)
        if session is None:
            return self._pages.render(request, "welcome.html")
        if session.roles is None:
            words = "The console could not ask the orchestrator which roles your account has. Try again in a moment."
            return self._pages.message(request, 503, "The orchestrator is not answering", words, Link("/", "Try again"))
        path = landing(session.roles)
        if path is None:
            return self._pages.render(request, "no_role.html")
        query = request.url.query
        return RedirectResponse(f"{path}?{query}" if query else path, status_code=303)

    def gated(self, use: Use, endpoint: Endpoint) -> Endpoint:
        """Return endpoint behind a door that answers 403 to a person whose roles use does not admit."""

        async def serve(request: Request) -> Response:
            session = signed_in(request)
            if session is not None and session.roles is not None and not use.admits(session.roles):
                return self._pages.refusal(request, missing_role(use.doing, use.role))
            return await endpoint(request)

        return serve

    def guarded(self, use: Use, endpoint: Endpoint) -> Endpoint:
        """Return endpoint behind a door for a page that calls no orchestrator: 403 to a person whose roles
        use does not admit, and 503 while the orchestrator has not said their roles (asked again next time)."""
        door = self.gated(use, endpoint)

        async def serve(request: Request) -> Response:
            session = signed_in(request)
            if session is not None and session.roles is None:
                words = (
                    "The console could not ask the orchestrator which roles your account has, and shows this page "
                    f"only to those who may {use.doing} ({use.role}). Try again in a moment."
                )
                return self._pages.message(request, 503, "The orchestrator is not answering", words)
            return await door(request)

        return serve
