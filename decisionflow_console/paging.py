"""Paging a listing the orchestrator pages by keyset (the inbox, one state of the operator desk).

The orchestrator's page tokens go forward only, and its listings carry no count. So a page's link
carries the trail of tokens that led to it (``back``, the first page's being empty), which gives
"previous" and the number of rows before this page; and a full page asks the orchestrator for one
row more (``more``) before it offers "next". What a page says of the whole is therefore what it
knows: "206" on a page that ends the listing, "200+" on one that does not, never a total guessed.
Rows decided while someone pages move the later pages, not the count of the rows already passed.
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


@dataclass(frozen=True, slots=True)
class Paging:
    """What a page shows of its listing, and the links to the pages beside it (empty: none)."""

    first_row: int
    rows: int
    more: bool
    first_page: str
    previous_page: str
    next_page: str

    @property
    def count(self) -> str:
        """The rows counted as far as they are known: "206" (this page ends the listing) or "200+"."""
        seen = self.first_row - 1 + self.rows
        return f"{seen}+" if self.more else str(seen)

    @property
    def summary(self) -> str:
        """The count in words, with the rows this page shows when there are other pages."""
        if self.rows == 0:
            return "None." if self.first_row == 1 else "No more rows: they were decided or settled meanwhile."
        shown = f"rows {self.first_row}–{self.first_row + self.rows - 1}"
        if self.more:
            return f"{self.count}: {shown} here, more on the next page."
        return f"{self.count}." if self.first_row == 1 else f"{self.count}: {shown} here, the last page."


def paging(
    path: str, kept: Mapping[str, str], at: Position, *, rows: int, page_size: int, next_token: str, more: bool
) -> Paging:
    """The paging of a page of rows read at position at; kept are the filters every link carries.

    more: the orchestrator holds a row after this page (next_token resumes there)."""

    def link(token: str, trail: tuple[str, ...]) -> str:
        query = {**kept, "page": token, "back": list(trail)} if token else dict(kept)
        encoded = urlencode(query, doseq=True)
        return f"{path}?{encoded}" if encoded else path

    first_row = len(at.trail) * page_size + 1 if at.token else 1
    previous = link(at.trail[-1], at.trail[:-1]) if at.trail else (link("", ()) if at.token else "")
    following = link(next_token, (*at.trail, at.token)) if more else ""
    return Paging(first_row, rows, more, link("", ()), previous, following)
