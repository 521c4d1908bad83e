"""What the ops commands accept: state names, ages such as ``90``, ``5m`` or ``2h``, and times with an offset.

Each parser raises ``argparse.ArgumentTypeError`` so a bad value ends the command as bad usage (exit 2),
before anything is sent.
"""

from __future__ import annotations

import argparse
import math
import re
from datetime import datetime, timedelta

from decisionflow.client import Consistency, LookupStatus, OperationState

# The server refuses a minimum age beyond a hundred years; the same bound here keeps the refusal local.
MAX_AGE = timedelta(days=36_525)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_AGE = re.compile(r"\A(\d+(?:\.\d+)?)([smhd]?)\Z")
LISTABLE_STATES = tuple(s for s in OperationState if s is not OperationState.UNSPECIFIED)


def state(text: str) -> OperationState:
    """Return the state named by text (``unknown``, ``PENDING_REVIEW``, ``OPERATION_STATE_UNKNOWN``)."""
    name = text.strip().upper().removeprefix("OPERATION_STATE_")
    found = OperationState.__members__.get(name)
    if found is None or found is OperationState.UNSPECIFIED:
        names = ", ".join(s.value.lower() for s in LISTABLE_STATES)
        raise argparse.ArgumentTypeError(f"unknown state {text!r} (one of {names})")
    return found


def age(text: str) -> timedelta:
    """Return the age given as seconds or with a unit (``90``, ``90s``, ``5m``, ``2h``, ``1d``)."""
    match = _AGE.match(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"expected seconds or a number with s, m, h or d (5m, 2h), not {text!r}")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(seconds) or timedelta(seconds=min(seconds, 1e12)) > MAX_AGE:
        raise argparse.ArgumentTypeError(f"expected at most 100 years, not {text!r}")
    return timedelta(seconds=seconds)


def positive_count(text: str) -> int:
    """Return a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, not {text!r}")
    return value


def lookup_status(text: str) -> LookupStatus:
    """Return APPLIED or NOT_FOUND from ``applied`` or ``not_found`` (any case, ``-`` for ``_``)."""
    name = text.strip().upper().replace("-", "_")
    if name not in ("APPLIED", "NOT_FOUND"):
        raise argparse.ArgumentTypeError(f"expected applied or not_found, not {text!r}")
    return LookupStatus(name)


def consistency(text: str) -> Consistency:
    """Return STRONG or EVENTUAL from ``strong`` or ``eventual`` (any case)."""
    name = text.strip().upper()
    if name not in ("STRONG", "EVENTUAL"):
        raise argparse.ArgumentTypeError(f"expected strong or eventual, not {text!r}")
    return Consistency(name)


def instant(text: str) -> datetime:
    """Return an ISO 8601 time that carries its UTC offset (``2026-12-01T03:04:05Z``)."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time such as 2026-12-01T03:04:05Z, not {text!r}"
        ) from None
    if value.utcoffset() is None:
        raise argparse.ArgumentTypeError(f"give the time's UTC offset (Z or +01:00): {text!r}")
    return value
