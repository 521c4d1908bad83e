"""JSON read strictly: no duplicate keys, no NaN or Infinity, no integer beyond Python's digit limit.

``json.loads`` keeps the last of two equal keys and accepts ``NaN``/``Infinity``, which JSON does
not have; two readers of the same bytes could then disagree about what they hold. Every reader of
a reviewed or signed document (credentials, proposals, edits, the receiver's payload) goes through
this module so that they all refuse the same inputs.
"""

from __future__ import annotations

import json
from typing import Any


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


def loads(text: str | bytes) -> Any:
    """Parse text as JSON, or raise StrictJSONError (duplicate key, NaN/Infinity, bad syntax, too deep)."""
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
