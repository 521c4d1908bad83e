"""Paging a listing the orchestrator pages by keyset (the inbox, one state of the operator desk).

The orchestrator's page tokens go forward only. So a page's link carries the trail of tokens that
led to it (``back``, the first page's being empty), which gives "previous" and the number of rows
before this page. Each page asks for the listing's total (``include_total_size``), counted in the
page's own snapshot, so every page says "rows 201–206 of 206". Rows decided while someone pages
move the later pages and the total, not the numbering of the rows already passed. An orchestrator
that does not count (an older one) leaves the total unset: the page then says what it knows, "200+"
while a row follows (``more``), the exact count on the page that ends the listing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from starlette.requests import Request


@dataclass(frozen=True, slots=True)
class Position:
    """Where the page asked for starts: its token (empty: the first page) and the tokens before it."""

    token: str
    trail: tuple[str, ...]


def position(request: Request) -> Position:
    """The page the request asks for (``page``) and the trail that led to it (``back``, oldest first)."""
    token = request.query_params.get("page", "").strip()
    trail = tuple(request.query_params.getlist("back")) if token else ()
    return Position(token, trail)


def counted_past(at: Position, *, rows: int, page_size: int, total: int | None) -> bool:
    """Whether the listing's total says rows follow this page of rows at position at.

    Rows decided since the earlier pages were read only lower the total, so a total above the rows
    numbered up to here means more follow; a total at or below them says nothing sure, and the
    page asks the orchestrator for one row past it instead."""
    first_row = len(at.trail) * page_size + 1 if at.token else 1
    return total is not None and total > first_row - 1 + rows


@dataclass(frozen=True, slots=True)
class Paging:
    """What a page shows of its listing, and the links to the pages beside it (empty: none)."""

    first_row: int
    rows: int
    more: bool
    first_page: str
    previous_page: str
    next_page: str
    # How many rows the listing holds over every page, as the orchestrator counted them with this
    # page; None when it did not count.
    total: int | None = None

    @property
    def count(self) -> str:
        """The listing's rows: the orchestrator's total ("206"); without one, as far as they are known
        ("206" on the page that ends the listing, "200+" before it)."""
        if self.total is not None:
            return str(self.total)
        seen = self.first_row - 1 + self.rows
        return f"{seen}+" if self.more else str(seen)

    @property
    def summary(self) -> str:
        """The count in words, with the rows this page shows when there are other pages."""
        if self.rows == 0:
            if self.first_row == 1:
                return "None."
            left = "" if self.total is None else f" ({self.total} in all)"
            return f"No more rows: they were decided or settled meanwhile{left}."
        shown = f"rows {self.first_row}–{self.first_row + self.rows - 1}"
        of = "" if self.total is None else f" of {self.total}"
        if self.more:
            return (
                f"{shown}{of}, more on the next page." if of else f"{self.count}: {shown} here, more on the next page."
            )
        if self.first_row == 1:
            return f"{self.count}."
        return f"{shown}{of}, the last page." if of else f"{self.count}: {shown} here, the last page."


def paging(
    path: str,
    kept: Mapping[str, str],
    at: Position,
    *,
    rows: int,
    page_size: int,
    next_token: str,
    more: bool,
    total: int | None = None,
) -> Paging:
    """The paging of a page of rows read at position at; kept are the filters every link carries.

    more: the orchestrator holds a row after this page (next_token resumes there); total: the rows of
    the listing as it counted them with this page (None: not counted)."""

    def link(token: str, trail: tuple[str, ...]) -> str:
        query = {**kept, "page": token, "back": list(trail)} if token else dict(kept)
        encoded = urlencode(query, doseq=True)
        return f"{path}?{encoded}" if encoded else path

    first_row = len(at.trail) * page_size + 1 if at.token else 1
    previous = link(at.trail[-1], at.trail[:-1]) if at.trail else (link("", ()) if at.token else "")
    following = link(next_token, (*at.trail, at.token)) if more else ""
    return Paging(first_row, rows, more, link("", ()), previous, following, total)
