"""Durations as a rules file writes them: ``90s``, ``30m``, ``4h``, ``2d`` and combinations (``1h30m``).

Units come in the order d, h, m, s, each at most once; every part is a whole number. A rule keeps
whole seconds only, so a duration is exactly the number of seconds its encoding frames.
"""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
# Nine digits per part bound the arithmetic; the model's own bound (a year) refuses long before.
_DURATION = re.compile(r"\A(?:(\d{1,9})d)?(?:(\d{1,9})h)?(?:(\d{1,9})m)?(?:(\d{1,9})s)?\Z")


def parse_duration(text: str) -> timedelta:
    """Return the duration text writes; ValueError naming the accepted forms when it writes none."""
    found = _DURATION.match(text) if text else None
    if found is None or not any(found.groups()):
        raise ValueError(f"{text!r} is not a duration: write whole numbers with units d, h, m, s, as 90s, 4h or 1h30m")
    seconds = sum(int(part) * size for part, (_, size) in zip(found.groups(), _UNITS, strict=True) if part)
    return timedelta(seconds=seconds)


def format_duration(duration: timedelta) -> str:
    """Return the shortest text ``parse_duration`` reads back as duration (whole seconds, at least 1s)."""
    left = whole_seconds(duration)
    if left <= 0:
        raise ValueError(f"{duration} is not a positive duration")
    text = ""
    for unit, size in _UNITS:
        count, left = divmod(left, size)
        if count:
            text += f"{count}{unit}"
    return text


def whole_seconds(duration: timedelta) -> int:
    """Return duration in seconds; ValueError when it has a fraction of a second."""
    if duration.microseconds:
        raise ValueError(f"{duration} is not a whole number of seconds")
    return duration.days * 86_400 + duration.seconds
