"""Page tokens: one format for every listing of every service.

A page token is opaque to callers: base64url of a strict-JSON array whose first element names
the listing (``"operations"``, ``"effects"``) and whose others are the position to resume after,
as the listing's keyset order needs it (a time and an operation id; a sequence number). Naming
the listing refuses a token carried from one listing to another, and strict JSON bounds a forged
token's nesting. Each listing checks its own position values (``decode`` hands them back
unchecked beyond being JSON); anything malformed is a ``ValueError`` that the listing answers
as INVALID_ARGUMENT on its ``page_token`` field.
"""

from __future__ import annotations

import base64
import binascii
import json

from decisionflow_server.foundation import strict_json

MAX_PAGE_TOKEN_CHARS = 512
"""Longest token accepted; issued ones are under 200 characters."""


def encode(listing: str, *position: str | int) -> str:
    """Return the token that resumes listing after position."""
    return base64.urlsafe_b64encode(json.dumps([listing, *position]).encode()).decode("ascii")


def decode(listing: str, token: str, arity: int) -> list[object]:
    """Return the arity position values of a token issued by encode(listing, ...); ValueError if it was not."""
    if len(token) > MAX_PAGE_TOKEN_CHARS:
        raise ValueError("page token too long")
    try:
        values = strict_json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (binascii.Error, UnicodeError) as exc:
        raise ValueError("page token is not base64url") from exc
    if not isinstance(values, list) or len(values) != arity + 1 or values[0] != listing:
        raise ValueError(f"not a page token of {listing}")
    return values[1:]
