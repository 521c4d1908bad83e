"""Rendering: Jinja2 templates with autoescaping always on, so every value a page shows (proposal
text, ids, names from the provider, messages from the orchestrator) is text, never markup."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from decisionflow.console import csrf
from decisionflow.console.refusals import Refusal
from decisionflow.console.web import current_session

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


# Characters that change how the text around them is shown without showing themselves: direction
# overrides, embeddings and isolates, and zero-width marks and joiners. A reviewer approves the
# text the operation id binds, so each one is shown where it is ("Trojan Source" reordering).
_HIDDEN = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_MARKER = Markup('<span class="hidden-char" title="invisible character {0}">⟦{0}⟧</span>')


def reveal(text: str) -> Markup:
    """Return text escaped, with each invisible formatting character shown as a marked ⟦U+XXXX⟧."""
    parts: list[Markup] = []
    end = 0
    for found in _HIDDEN.finditer(text):
        parts.append(escape(text[end : found.start()]))
        parts.append(_MARKER.format(f"U+{ord(found.group()):04X}"))
        end = found.end()
    parts.append(escape(text[end:]))
    return Markup("").join(parts)


def age(moment: datetime | None, now: datetime | None = None) -> str:
    """Return how long ago moment was, in the largest whole unit that fits ("3 min", "2 h", "5 d")."""
    if moment is None:
        return "-"
    seconds = max(0.0, ((now or datetime.now(UTC)) - moment).total_seconds())
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def when(moment: datetime | None) -> str:
    """Return moment as UTC to the second, or "-"."""
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


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

    def render(self, request: Request, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
        """Return template rendered with context, the person signed in (or None) and the CSRF field."""
        session = current_session(request)
        person = session.person if session is not None and session.signed_in else None
        page = self._env.get_template(template).render(
            person=person,
            csrf_field=csrf.FIELD,
            csrf_token=session.csrf_token if session is not None else "",
            **context,
        )
        return HTMLResponse(page, status_code=status)

    def refusal(self, request: Request, refusal: Refusal) -> HTMLResponse:
        """Return the page of a refusal, with its HTTP status."""
        return self.render(request, "refusal.html", status=refusal.status, refusal=refusal)

    def message(self, request: Request, status: int, title: str, words: str) -> HTMLResponse:
        """Return a page that says one thing (forged form, sign-in failed, not signed in)."""
        return self.render(request, "message.html", status=status, title=title, words=words)
