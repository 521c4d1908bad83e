"""What a signed-in person is offered: the navigation's links, each shown only when the orchestrator's
policy admits one of the person's roles to the call its page makes (``access``).

The roles are the orchestrator's answer to GetCaller, read with the person's own token on the first
request of their session and kept in the session (``CallerRoles``); which role may make which call
is the orchestrator's policy (``decisionflow_server.runtime.auth.RPC_ROLES``). A page whose link is
left out answers 403 when opened by its address (``access_pages``), and the orchestrator refuses its
calls all the same.

    roles the orchestrator grants      links shown
    reviewer, author or operator       Inbox
    author                             Start a case
    operator                           Operator desk, Relay
    auditor or operator                Audit log
    none of them (PERMISSION_DENIED)   none
    not read yet (the call failed)     none; read again on the next request
"""

from __future__ import annotations

from dataclasses import dataclass

from decisionflow.client import DecisionflowError, PermissionDenied, Role
from decisionflow_console.access import DESK, INBOX, READ_LOG, RELAY, START, Use
from decisionflow_console.orchestrator import Orchestrator
from decisionflow_console.sessions import Session
from decisionflow_console.web import SESSION_SCOPE_KEY, ASGIApp, Receive, Scope, Send


@dataclass(frozen=True, slots=True)
class NavLink:
    """A link of the navigation: where it goes, its words, its element id, and the use its page serves."""

    href: str
    text: str
    element_id: str
    use: Use


NAVIGATION: tuple[NavLink, ...] = (
    NavLink("/inbox", "Inbox", "nav-inbox", INBOX),
    NavLink("/start", "Start a case", "nav-start", START),
    NavLink("/operations", "Operator desk", "nav-desk", DESK),
    NavLink("/relay", "Relay", "nav-relay", RELAY),
    NavLink("/audit", "Audit log", "nav-audit", READ_LOG),
)


def links_for(roles: frozenset[Role] | None) -> tuple[NavLink, ...]:
    """Return the links whose page's call the policy admits one of roles to; none while roles are unknown."""
    return tuple(link for link in NAVIGATION if link.use.admits(roles))


async def read_roles(orchestrator: Orchestrator, access_token: str) -> frozenset[Role] | None:
    """Return the roles the orchestrator grants the token's holder: none when it refuses the holder every
    role of its own (PERMISSION_DENIED); None when it did not say (unavailable, the token refused)."""
    try:
        return (await orchestrator.caller(access_token)).roles
    except PermissionDenied:
        return frozenset()
    except DecisionflowError:
        return None


class CallerRoles:
    """Reads a signed-in session's roles from the orchestrator on its first request, and keeps them in
    the session for every later page; a read that failed is tried again on the next request."""

    def __init__(self, app: ASGIApp, orchestrator: Orchestrator) -> None:
        self._app = app
        self._orchestrator = orchestrator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request once the session, if signed in, knows its roles (or the read failed)."""
        session: Session | None = scope.get(SESSION_SCOPE_KEY) if scope["type"] == "http" else None
        if session is not None and session.signed_in and session.roles is None and session.access_token:
            session.roles = await read_roles(self._orchestrator, session.access_token)
        await self._app(scope, receive, send)
