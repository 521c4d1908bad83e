"""Plain-text tables and ages, as ``ops list`` and ``pending`` print them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta


def duration(span: timedelta | None) -> str:
    """Return span as the two largest units (``3d4h``, ``2h5m``, ``5m3s``, ``42s``); ``-`` when unknown."""
    if span is None:
        return "-"
    seconds = max(0, int(span.total_seconds()))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")]
    while len(parts) > 1 and parts[0][0] == 0:
        parts.pop(0)
    return "".join(f"{value}{unit}" for value, unit in parts[:2] if value or len(parts) == 1) or "0s"


def since(moment: datetime | None, now: datetime) -> timedelta | None:
    """Return how long ago moment was, None when it is unknown."""
    return None if moment is None else now - moment


def table(rows: Sequence[tuple[str, ...]], columns: tuple[str, ...]) -> str:
    """Return rows under columns, each column as wide as its widest cell (the last one unpadded)."""
    lines = [columns, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(line, widths, strict=False)), line[-1]]).rstrip()
        for line in lines
    )
