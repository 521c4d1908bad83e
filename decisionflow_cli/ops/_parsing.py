"""What the ops commands accept: state names, ages such as ``90``, ``5m`` or ``2h``, and times with an offset.

Each parser raises ``argparse.ArgumentTypeError`` so a bad value ends the command as bad usage (exit 2),
before anything is sent.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta

from decisionflow.client import Consistency, LookupStatus, OperationState
from decisionflow_server.foundation import settings

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
    """Return the age given as seconds or with a unit (``90``, ``90s``, ``5m``, ``2h``, ``1d``), at most
    100 years: the server refuses a minimum age beyond that, and the same bound here keeps the refusal local."""
    try:
        return settings.age(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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
