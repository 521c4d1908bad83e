"""The HTTP layer every page goes through: security headers, a bound on request bodies, the session
lookup, and one JSON access-log line and two metric samples per request.

Headers on every response: a Content-Security-Policy that admits only this origin's stylesheet,
images and script files, never an inline script or handler (the pages are plain HTML forms; the one
script, static/local-times.js, shows times in the browser's time zone), no framing, no referrer, no
content sniffing, and no caching of pages that show proposals or tokens' holders.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.requests import ClientDisconnect, HTTPConnection, cookie_parser
from starlette.routing import Match

from decisionflow_console.sessions import COOKIE_NAME, Session, SessionStore

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)
# Larger than any request the orchestrator accepts (its largest valid StartReview is about 360 KiB,
# percent-encoded in a form), smaller than the 1 MiB message a gRPC client may send: a form over it
# is refused here, so no call is ever refused for its size by the transport instead of by a rule.
MAX_FORM_BYTES = 1024 * 1024
# The status a request is logged and counted with when its client left before the answer (nginx's
# 499): a client that goes away is not a server error, and no answer was sent.
CLIENT_LEFT = 499
SESSION_SCOPE_KEY = "decisionflow_console.session"

access_logger = logging.getLogger("decisionflow.console.access")


def current_session(connection: HTTPConnection) -> Session | None:
    """Return the live session of the request, or None."""
    session: Session | None = connection.scope.get(SESSION_SCOPE_KEY)
    return session


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request, adding the headers to its response start."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self._app(scope, receive, send_with_headers)


class BodyLimit:
    """Answers 413 for a request body over MAX_FORM_BYTES, by its Content-Length or as it streams in."""

    def __init__(self, app: ASGIApp, too_large: ASGIApp) -> None:
        self._app = app
        self._too_large = too_large

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request unless its body is too large."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
            await self._too_large(scope, receive, send)
            return
        received = 0

        async def bounded_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > MAX_FORM_BYTES:
                raise BodyTooLarge
            return message

        try:
            await self._app(scope, bounded_receive, send)
        except BodyTooLarge:
            await self._too_large(scope, receive, send)


class BodyTooLarge(Exception):
    """A request body grew past MAX_FORM_BYTES while it was read."""


class Sessions:
    """Finds the session the cookie names and puts it in the scope."""

    def __init__(self, app: ASGIApp, store: SessionStore) -> None:
        self._app = app
        self._store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request with its session (or none) in the scope."""
        if scope["type"] == "http":
            scope[SESSION_SCOPE_KEY] = self._store.find(HTTPConnection(scope).cookies.get(COOKIE_NAME))
        await self._app(scope, receive, send)


def signed_in_request(store: SessionStore) -> Callable[[Sequence[tuple[bytes, bytes]]], bool]:
    """Return a function telling from a request's headers whether its cookie names a signed-in session
    (the connection limits keep such a request's body from being closed to make room)."""

    def signed_in(headers: Sequence[tuple[bytes, bytes]]) -> bool:
        cookie = next((value for name, value in headers if name == b"cookie"), None)
        if cookie is None:
            return False
        session = store.find(cookie_parser(cookie.decode("latin-1")).get(COOKIE_NAME))
        return session is not None and session.signed_in

    return signed_in


class RequestMetrics:
    """Counts and times each request under its route's path template."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "decisionflow_console_requests_total",
            "HTTP requests answered by the console, by method, route and status code",
            ["method", "route", "code"],
            registry=registry,
        )
        self.seconds = Histogram(
            "decisionflow_console_request_seconds",
            "Time to answer an HTTP request (orchestrator calls included), by method and route",
            ["method", "route"],
            registry=registry,
        )


class AccessLog:
    """Writes one JSON line per request (method, path without query, route, status, duration, who)
    and records it in RequestMetrics. The query string is left out: no value from a form or a
    sign-in callback reaches the log. A request whose client left while its body was read (Starlette's
    ClientDisconnect) ends here, logged and counted as CLIENT_LEFT, without a traceback."""

    def __init__(self, app: ASGIApp, metrics: RequestMetrics, route_of: Callable[[Scope], str]) -> None:
        self._app = app
        self._metrics = metrics
        self._route_of = route_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request, then log and count it."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self._app(scope, receive, recording_send)
        except ClientDisconnect:
            status = CLIENT_LEFT  # nothing can be answered: the connection is gone
        finally:
            elapsed = time.perf_counter() - started
            route = self._route_of(scope)
            method = str(scope.get("method", ""))
            self._metrics.requests.labels(method, route, str(status)).inc()
            self._metrics.seconds.labels(method, route).observe(elapsed)
            session: Session | None = scope.get(SESSION_SCOPE_KEY)
            person = session.person if session is not None else None
            access_logger.info(
                "%s %s %d",
                method,
                scope.get("path", ""),
                status,
                extra={
                    "event": "http_request",
                    "service": "console",
                    "code": status,
                    "detail": route,
                    "duration_ms": round(elapsed * 1000, 1),
                    "principal": person.subject if person is not None else None,
                },
            )


def route_template(routes: list[Any]) -> Callable[[Scope], str]:
    """Return a function naming a request's route by its path template (``/proposals/{operation_id}``),
    so a metric's labels stay few whatever ids are asked for."""

    def route_of(scope: Scope) -> str:
        for route in routes:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return str(getattr(route, "path", "other"))
        return "unmatched"

    return route_of
