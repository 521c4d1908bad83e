"""The relay's page (role operator, beside the desk): where ``decisionflow-relay`` stands in relaying the
event feed into NATS JetStream, read from the relay's own metrics endpoint (``relay``) each time the page
is opened. Unset, the page says how to configure it; unreadable, it says what was tried and what happened.

    the console                          the page says                                             HTTP
    --relay-metrics-url unset            the relay is not configured, and the setting that names it  200
    the relay's metrics read             its cursor, lag, broker, published/duplicates/errors        200
    nothing answers there (or in time)   the relay cannot be reached: the URL tried, what happened   503
    an answer that is not its metrics    the same, with what was wrong with the answer               502
"""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from decisionflow_console.pages import Pages
from decisionflow_console.relay import RelayUnreadable, read_position
from decisionflow_console.review_pages import signed_in, to_sign_in


class RelayPages:
    """The relay's position, read from its metrics at metrics_url (None: not configured)."""

    def __init__(self, pages: Pages, metrics_url: str | None) -> None:
        self._pages = pages
        self._url = metrics_url

    async def position(self, request: Request) -> Response:
        """Show the relay's position as its metrics say it now, or why it cannot be shown."""
        if signed_in(request) is None:
            return to_sign_in(request)
        if self._url is None:
            return self._pages.render(request, "relay.html", url=None, problem=None)
        tried_at = datetime.now(UTC)
        try:
            position = await read_position(self._url)
        except RelayUnreadable as problem:
            return self._pages.render(
                request, "relay.html", status=problem.status, url=self._url, problem=problem, tried_at=tried_at
            )
        return self._pages.render(request, "relay.html", url=self._url, problem=None, position=position)
