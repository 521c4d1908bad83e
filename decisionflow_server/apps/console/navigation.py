"""What a signed-in person is offered: the navigation's links, each shown only when the orchestrator's
policy admits one of the person's roles to the call its page makes.

The roles are the orchestrator's answer to GetCaller, read with the person's own token on the first
request of their session and kept in the session (``CallerRoles``); which role may make which call
is the orchestrator's policy (``decisionflow_server.runtime.auth.RPC_ROLES``). The console decides nothing: a page
whose link is left out still answers with the orchestrator's refusal when opened by its address.

    roles the orchestrator grants      links shown
    reviewer, author or operator       Inbox
    author                             Start a case
    operator                           Operator desk
    auditor or operator                Audit log
    none of them (PERMISSION_DENIED)   none
    not read yet (the call failed)     none; read again on the next request
"""

from __future__ import annotations

from dataclasses import dataclass

from decisionflow.client import DecisionflowError, PermissionDenied, Role
from decisionflow_server.apps.console.orchestrator import Orchestrator
from decisionflow_server.apps.console.sessions import Session
from decisionflow_server.apps.console.web import SESSION_SCOPE_KEY, ASGIApp, Receive, Scope, Send
from decisionflow_server.runtime.auth import RPC_ROLES


@dataclass(frozen=True, slots=True)
class NavLink:
    """A link of the navigation: where it goes, its words, its element id, and the RPC its page calls."""

    href: str
    text: str
    element_id: str
    rpc: str


# Also the link an operation's page gives to its audit trail, to the same roles.
AUDIT_LOG = NavLink("/audit", "Audit log", "nav-audit", "/decisionflow.v1.AuditService/GetInclusionProof")
NAVIGATION: tuple[NavLink, ...] = (
    NavLink("/", "Inbox", "nav-inbox", "/decisionflow.v1.ReviewService/ListPendingReviews"),
    NavLink("/start", "Start a case", "nav-start", "/decisionflow.v1.ReviewService/StartReview"),
    NavLink("/operations", "Operator desk", "nav-desk", "/decisionflow.v1.OperationsService/ListOperations"),
    AUDIT_LOG,
)
# Looked up once, at import: a link naming a call the policy does not know fails here, not on a page.
_ALLOWED: dict[NavLink, frozenset[Role]] = {link: RPC_ROLES[link.rpc] for link in NAVIGATION}


def links_for(roles: frozenset[Role] | None) -> tuple[NavLink, ...]:
    """Return the links whose page's call the policy admits one of roles to; none while roles are unknown."""
    return tuple(link for link in NAVIGATION if admits(roles, link))


def admits(roles: frozenset[Role] | None, link: NavLink) -> bool:
    """Whether the policy admits one of roles to the call link's page makes (never while roles are unknown)."""
    return roles is not None and not roles.isdisjoint(_ALLOWED[link])


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
