"""What a reviewer sees of a proposal: every string in it shown with its invisible characters marked.

A reviewer approves the exact bytes the operation id binds, so a character that changes how the text
around it is shown without showing itself (a direction override, a zero-width mark) is shown where it
is, as ⟦U+XXXX⟧ ("Trojan Source" reordering): in the body, a quotation, the policy's name, version
label and rules, an author's name, the list of changes. ``revealed`` wraps a whole view (a proposal, a
diff, an inbox entry) so that every string a template reads from it, however deep, is marked: a field
added later is marked too, without a filter to remember. Forms that edit a proposal are given the raw
values, never these (a marker typed back would change the proposal).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from typing import Any

from markupsafe import Markup, escape

# Characters that change how the text around them is shown without showing themselves: direction
# overrides, embeddings and isolates, and zero-width marks and joiners.
_HIDDEN = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_MARKER = Markup('<span class="hidden-char" title="invisible character {0}">⟦{0}⟧</span>')
_PLAIN = (bool, int, float, datetime, Enum, type(None))


def reveal(text: str) -> Markup:
    """Return text escaped, with each invisible formatting character shown as a marked ⟦U+XXXX⟧."""
    if isinstance(text, Markup):
        return text
    parts: list[Markup] = []
    end = 0
    for found in _HIDDEN.finditer(text):
        parts.append(escape(text[end : found.start()]))
        parts.append(_MARKER.format(f"U+{ord(found.group()):04X}"))
        end = found.end()
    parts.append(escape(text[end:]))
    return Markup("").join(parts)


def revealed(value: Any) -> Any:
    """Return value as a template should read it: strings marked, containers and records wrapped."""
    if isinstance(value, str):
        return reveal(value)
    if isinstance(value, _PLAIN):
        return value
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
