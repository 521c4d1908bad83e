"""What a reviewer sees of a proposal: every string in it shown with what a reader cannot see marked.

A reviewer approves the exact bytes the operation id binds, so two kinds of character are shown for
what they are, each as a marker with its description as title and accessible name:
- every character a reader cannot see (``invisible``: format characters, tags, variation selectors,
  spaces other than U+0020, default-ignorable code points, private use, unassigned) as ⟦U+XXXX⟧, a
  run of tag characters as ⟦N tag characters: the text they spell⟧;
- every word that mixes scripts (``lookalikes``, Unicode TS 39), such as "paypal.com" spelled with a
  Cyrillic a (U+0430), highlighted and followed by ⟦mixed scripts: Latin + Cyrillic⟧.
This holds in the body, a quotation, the policy's name, version label and rules, an author's name,
the diff, the list of changes and the audit trail. ``revealed`` wraps a whole view (a proposal, a diff,
an inbox entry) so that every string a template reads from it, however deep, is marked: a field
added later is marked too, without a filter to remember. Forms that edit a proposal are given the raw
values, never these (a marker typed back would change the proposal).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from typing import Any

import regex
from markupsafe import Markup, escape

from decisionflow_console.invisible import Hidden, pieces
from decisionflow_console.lookalikes import mixed_scripts

# Words and the whitespace between them: scripts are mixed within a word, not across a space.
_WORDS = regex.compile(r"(\s+)|(\S+)")
_PLAIN = (bool, int, float, datetime, Enum, type(None))


def reveal(text: str) -> Markup:
    """Return text escaped, each invisible character and each word that mixes scripts marked."""
    if isinstance(text, Markup):
        return text
    parts: list[str] = []
    for space, word in _WORDS.findall(text):
        mixed = None if space else mixed_scripts(word)
        if mixed is None:
            parts.append(_shown(space or word))
        else:
            said = escape(mixed.description)
            parts.append(f'<mark class="mixed-script" title="{said}">{_shown(word)}</mark>')
            parts.append(_marker("script-mark", mixed.description, mixed.code))
    # Every part is escaped text or a marker built from escaped text, so the whole is markup as it
    # stands. Built as plain strings: Markup.format costs about 90 µs a marker, and a 64 KiB body can
    # hold 16,384 of them.
    return Markup("".join(parts))  # noqa: S704


def _shown(text: str) -> str:
    return "".join(_hidden(piece) if isinstance(piece, Hidden) else str(escape(piece)) for piece in pieces(text))


@functools.lru_cache(maxsize=4096)
def _hidden(piece: Hidden) -> str:
    return _marker("hidden-char", piece.description, piece.code)


def _marker(kind: str, description: str, code: str) -> str:
    said = escape(description)
    return f'<span class="{kind}" role="img" aria-label="{said}" title="{said}">⟦{escape(code)}⟧</span>'


def revealed(value: Any) -> Any:
    """Return value as a template should read it: strings marked, containers and records wrapped."""
    # Before str: an enum of str values (a state) is a name the console owns, not text from a proposal.
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, str):
        return reveal(value)
    if isinstance(value, Mapping):
        return {reveal(str(k)): revealed(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return tuple(revealed(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return Revealed(value)
    raise TypeError(f"no marking for a {type(value).__name__} shown from a proposal")


class Revealed:
    """A record (a frozen dataclass) whose every attribute a template reads is revealed()."""

    __slots__ = ("_record",)

    def __init__(self, record: Any) -> None:
        self._record = record

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return revealed(getattr(self._record, name))

    def __repr__(self) -> str:
        return f"Revealed({self._record!r})"
