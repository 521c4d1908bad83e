"""The console as one ASGI application: its routes, and the layers every request passes through
(access log and metrics, security headers, the body bound, the session lookup)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Gauge
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from decisionflow_console.access import (
    DECIDE,
    DESK,
    EDIT,
    INBOX,
    READ_LOG,
    READ_PROPOSAL,
    REDRIVE,
    RELAY,
    SETTLE,
    START,
)
from decisionflow_console.access_pages import AccessPages
from decisionflow_console.audit_pages import AuditPages
from decisionflow_console.config import ConsoleConfig
from decisionflow_console.navigation import CallerRoles
from decisionflow_console.operator_pages import OperatorPages
from decisionflow_console.orchestrator import Orchestrator
from decisionflow_console.pages import STATIC, Pages
from decisionflow_console.relay_pages import RelayPages
from decisionflow_console.review_pages import ReviewPages
from decisionflow_console.sessions import SessionStore
from decisionflow_console.signin import CALLBACK_PATH, SignIn
from decisionflow_console.web import (
    MAX_FORM_BYTES,
    AccessLog,
    BodyLimit,
    Receive,
    RequestMetrics,
    Scope,
    SecurityHeaders,
    Send,
    Sessions,
    route_template,
)

HEALTH_PATH = "/healthz"


async def healthz(_: Request) -> Response:
    """Answer SERVING while the process serves requests (the orchestrator is not asked)."""
    return PlainTextResponse("SERVING\n")


async def favicon(_request: Request) -> Response:
    """The console's icon, where browsers ask for it (an SVG: the CSP allows images from the console only)."""
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")


def create_app(
    config: ConsoleConfig,
    origin: str,
    *,
    registry: CollectorRegistry | None = None,
    sessions: SessionStore | None = None,
) -> Starlette:
    """Return the console for config, reached by browsers at origin (``https://host``), recording its
    request metrics in registry."""
    pages = Pages()
    store = sessions if sessions is not None else SessionStore(config.session_key, config.session_lifetime_seconds)
    orchestrator = Orchestrator(
        config.orchestrator_target,
        ca_file=config.ca_file,
        allow_cleartext_token=config.allow_cleartext_token,
        timeout_seconds=config.timeout_seconds,
    )
    sign_in = SignIn(config, store, pages, origin)
    review = ReviewPages(orchestrator, pages)
    operator = OperatorPages(orchestrator, pages)
    audit = AuditPages(orchestrator, pages, config.audit_log_key)
    relay = RelayPages(pages, config.relay_metrics_url)
    access = AccessPages(pages)
    gated = access.gated
    # Each page behind the door of the use it serves (decisionflow_console.access).
    routes: list[Any] = [
        Route(HEALTH_PATH, healthz),
        Route("/", access.land),
        Route("/login", sign_in.login),
        Route(CALLBACK_PATH, sign_in.callback),
        Route("/signout", sign_in.signout, methods=["POST"]),
        Route("/inbox", gated(INBOX, review.inbox)),
        Route("/cases", gated(READ_PROPOSAL, review.case)),
        Route("/start", gated(START, review.start_form)),
        Route("/start", gated(START, review.start), methods=["POST"]),
        Route("/proposals/{operation_id}", gated(READ_PROPOSAL, review.proposal)),
        Route("/proposals/{operation_id}/edit", gated(EDIT, review.edit_form)),
        Route("/edit", gated(EDIT, review.edit), methods=["POST"]),
        Route("/decide", gated(DECIDE, review.decide), methods=["POST"]),
        Route("/operations", gated(DESK, operator.desk)),
        Route("/operations/{operation_id}", gated(DESK, operator.describe)),
        Route("/operations/{operation_id}/redrive", gated(REDRIVE, operator.confirm_redrive)),
        Route("/operations/{operation_id}/redrive", gated(REDRIVE, operator.redrive), methods=["POST"]),
        Route("/operations/{operation_id}/settle", gated(SETTLE, operator.settle_form)),
        Route("/operations/{operation_id}/settle", gated(SETTLE, operator.settle), methods=["POST"]),
        # The relay's page calls no orchestrator: its door opens only once the roles are known.
        Route("/relay", access.guarded(RELAY, relay.position)),
        Route("/audit", gated(READ_LOG, audit.lookup)),
        Route("/audit/{operation_id}", gated(READ_LOG, audit.trail)),
        Route("/audit/{operation_id}/bundle", gated(READ_LOG, audit.bundle)),
        Route("/favicon.ico", favicon),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await orchestrator.start()
        try:
            yield
        finally:
            await orchestrator.stop()

    async def too_large(scope: Scope, receive: Receive, send: Send) -> None:
        words = f"This form is larger than the console accepts ({MAX_FORM_BYTES // 1024} KiB). Nothing was sent."
        await pages.message(Request(scope, receive), 413, "Too large", words)(scope, receive, send)

    app = Starlette(routes=routes, lifespan=lifespan)
    registry = registry or CollectorRegistry()
    metrics = RequestMetrics(registry)
    held = Gauge("decisionflow_console_sessions", "Signed-in sessions the console holds in memory", registry=registry)
    held.set_function(lambda: len(store))
    # Innermost first (each layer added wraps those before it): a session's roles are read once the
    # session is found; every answer is logged and counted, and carries the security headers.
    app.add_middleware(CallerRoles, orchestrator=orchestrator)
    app.add_middleware(Sessions, store=store)
    app.add_middleware(BodyLimit, too_large=too_large)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(AccessLog, metrics=metrics, route_of=route_template(routes))
    return app
