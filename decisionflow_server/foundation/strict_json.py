"""JSON read strictly: no duplicate keys, no NaN or Infinity, no integer beyond Python's digit limit,
no nesting deeper than ``MAX_DEPTH``.

``json.loads`` keeps the last of two equal keys and accepts ``NaN``/``Infinity``, which JSON does
not have; two readers of the same bytes could then disagree about what they hold. Every reader of
a reviewed or signed document (credentials, proposals, edits, the receiver's payload) goes through
this module so that they all refuse the same inputs.

The depth bound is checked before parsing, on the text: the parser recurses once per level,
so without it how deep a document may go would depend on how deep the caller's own stack
already is (a request refused at one depth in one thread and accepted in another), and a
document accepted near the limit could still break whoever walks it later.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects accepted; every document the project reads is far shallower."""

# Escapes are dropped first, then strings, so brackets inside strings are not counted. Two
# passes keep both linear (one pattern with an alternation under a repeat backtracks
# quadratically on an unterminated run of escaped quotes); anything that is not valid JSON is
# left to the parser to refuse.
_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')
_BRACKET = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class StrictJSONError(ValueError):
    """The text is not strict JSON; duplicate_key names the repeated key when that was the fault."""

    def __init__(self, reason: str, duplicate_key: str | None = None) -> None:
        super().__init__(reason)
        self.duplicate_key = duplicate_key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJSONError(f"duplicate JSON key {key!r}", duplicate_key=key)
        result[key] = value
    return result


def _refuse_constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not a JSON number")


def _integer(literal: str) -> int:
    try:
        return int(literal)
    except ValueError as exc:
        # Python refuses to convert integer literals beyond its digit limit.
        raise StrictJSONError(f"integer of {len(literal)} characters is too long") from exc


def _depth(text: str) -> int:
    """Return how deeply the text's arrays and objects nest, brackets inside strings not counted."""
    steps = (_STEP[bracket] for bracket in _BRACKET.findall(_STRING.sub("", _ESCAPE.sub("", text))))
    return max(itertools.accumulate(steps, initial=0))


def loads(text: str | bytes) -> Any:
    """Parse text as JSON, or raise StrictJSONError (duplicate key, NaN/Infinity, bad syntax, too deep)."""
    if isinstance(text, bytes | bytearray):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError(f"not UTF-8: {exc}") from exc
    if _depth(text) > MAX_DEPTH:
        raise StrictJSONError(f"nested too deeply (more than {MAX_DEPTH} levels)")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_refuse_constant, parse_int=_integer)
    except StrictJSONError:
        raise
    except RecursionError as exc:
        raise StrictJSONError("nested too deeply") from exc
    except ValueError as exc:
        raise StrictJSONError(str(exc)) from exc


def loads_object(text: str | bytes) -> dict[str, Any]:
    """Parse text as strict JSON whose top level is an object, or raise StrictJSONError."""
    document = loads(text)
    if not isinstance(document, dict):
        raise StrictJSONError("the top level must be a JSON object")
    return document
