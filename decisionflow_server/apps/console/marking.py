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
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from typing import Any

import regex
from markupsafe import Markup, escape

from decisionflow_server.apps.console.invisible import Hidden, pieces
from decisionflow_server.apps.console.lookalikes import mixed_scripts

_MARKER = Markup('<span class="{0}" role="img" aria-label="{1}" title="{1}">⟦{2}⟧</span>')
_MIXED = Markup('<mark class="mixed-script" title="{0}">{1}</mark>')
# Words and the whitespace between them: scripts are mixed within a word, not across a space.
_WORDS = regex.compile(r"(\s+)|(\S+)")
_PLAIN = (bool, int, float, datetime, Enum, type(None))


def reveal(text: str) -> Markup:
    """Return text escaped, each invisible character and each word that mixes scripts marked."""
    if isinstance(text, Markup):
        return text
    parts: list[Markup] = []
    for space, word in _WORDS.findall(text):
        if space:
            parts.append(_shown(space))
            continue
        mixed = mixed_scripts(word)
        if mixed is None:
            parts.append(_shown(word))
        else:
            parts.append(_MIXED.format(mixed.description, _shown(word)))
            parts.append(_MARKER.format("script-mark", mixed.description, mixed.code))
    return Markup("").join(parts)


def _shown(text: str) -> Markup:
    return Markup("").join(
        _MARKER.format("hidden-char", piece.description, piece.code) if isinstance(piece, Hidden) else escape(piece)
        for piece in pieces(text)
    )


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
