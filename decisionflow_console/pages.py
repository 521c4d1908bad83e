"""Rendering: Jinja2 templates with autoescaping always on, so every value a page shows (proposal
text, ids, names from the provider, messages from the orchestrator) is text, never markup; what a
proposal says is shown through ``decisionflow_console.marking``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse

from decisionflow_console import csrf
from decisionflow_console.access import Offers
from decisionflow_console.marking import reveal
from decisionflow_console.navigation import NavLink, links_for
from decisionflow_console.refusals import Link, Refusal
from decisionflow_console.web import current_session
from decisionflow_console.words import in_words

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


def age(moment: datetime | None, now: datetime | None = None) -> str:
    """Return how long ago moment was, in the largest whole unit that fits ("3 min", "2 h", "5 d")."""
    if moment is None:
        return "-"
    seconds = max(0.0, ((now or datetime.now(UTC)) - moment).total_seconds())
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def utc_text(moment: datetime) -> str:
    """Return moment as UTC to the second, as text ("2026-12-02 09:00:00 UTC")."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def when(moment: datetime | None) -> Markup | str:
    """Return moment as a ``<time>`` element: its text UTC to the second (what a page without script
    shows), its datetime attribute the instant to the second, which static/local-times.js rewrites to
    the browser's own time zone; "-" for no moment."""
    if moment is None:
        return "-"
    instant = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Markup('<time datetime="{}">{}</time>').format(instant, utc_text(moment))


class Pages:
    """Renders a template into an HTML response with the signed-in person and their CSRF token."""

    def __init__(self) -> None:
        self._env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES),
            autoescape=True,  # every template, whatever its name
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters["age"] = age
        self._env.filters["when"] = when
        self._env.filters["reveal"] = reveal
        self._env.filters["words"] = in_words

    def render(self, request: Request, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
        """Return template rendered with context, the person signed in (or None), the links and actions
        their roles allow and the CSRF field."""
        session = current_session(request)
        signed_in = session if session is not None and session.signed_in else None
        roles = signed_in.roles if signed_in is not None else None
        page = self.html(
            template,
            person=signed_in.person if signed_in is not None else None,
            csrf_token=session.csrf_token if session is not None else "",
            links=links_for(roles),
            offers=Offers.to(roles),
            **context,
        )
        return HTMLResponse(page, status_code=status)

    def html(
        self,
        template: str,
        *,
        person: Any,
        csrf_token: str,
        links: Sequence[NavLink] = (),
        offers: Offers | None = None,
        **context: Any,
    ) -> str:
        """Return template rendered with context for person (None: nobody signed in), offering links and
        the actions offers allows."""
        offered = offers if offers is not None else Offers()
        return self._env.get_template(template).render(
            person=person, csrf_field=csrf.FIELD, csrf_token=csrf_token, links=links, offers=offered, **context
        )

    def refusal(self, request: Request, refusal: Refusal) -> HTMLResponse:
        """Return the page of a refusal, with its HTTP status."""
        return self.render(request, "refusal.html", status=refusal.status, refusal=refusal)

    def message(self, request: Request, status: int, title: str, words: str, link: Link | None = None) -> HTMLResponse:
        """Return a page that says one thing (forged form, sign-in failed, session ended), with where to go next."""
        return self.render(request, "message.html", status=status, title=title, words=words, link=link)
