"""The parsers a setting's text goes through: each returns the typed value or raises ValueError
saying what it accepts (``parse_settings`` adds the flag and the environment variable)."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from decisionflow import addresses

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

LOG_LEVELS = ("debug", "info", "warning", "error")
GRPC_LOG_LEVELS = ("off", "error", "warning", "info")
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


def text(value: str) -> str:
    """Return value unchanged: any text is accepted."""
    return value


def _seconds(value: str, *, positive: bool) -> float:
    form = "a positive" if positive else "a non-negative"
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"expected {form} number of seconds, not {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        raise ValueError(f"expected {form} number of seconds, not {value!r}")
    return seconds


# The longest age a command takes: beyond it, now minus the age falls outside the dates a database holds.
MAX_AGE = timedelta(days=36_525)
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_AGE = re.compile(r"\A(\d+(?:\.\d+)?)([smhd]?)\Z")


def age(value: str) -> timedelta:
    """Return an age given as seconds or with a unit (``90``, ``90s``, ``5m``, ``2h``, ``30d``), at most 100 years."""
    match = _AGE.match(value.strip().lower())
    if match is None:
        raise ValueError(f"expected seconds or a number with s, m, h or d (5m, 2h), not {value!r}")
    number = float(match.group(1)) * _AGE_UNITS[match.group(2) or "s"]
    if not math.isfinite(number) or timedelta(seconds=min(number, 1e12)) > MAX_AGE:
        raise ValueError(f"expected at most 100 years, not {value!r}")
    return timedelta(seconds=number)


def seconds(value: str) -> float:
    """Return a finite, non-negative number of seconds (0 allowed)."""
    return _seconds(value, positive=False)


def positive_seconds(value: str) -> float:
    """Return a finite number of seconds greater than zero."""
    return _seconds(value, positive=True)


def rate(value: str) -> float:
    """Return a finite, non-negative number (of things per second; 0 allowed, usually for "no limit")."""
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a non-negative number, not {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"expected a non-negative number, not {value!r}")
    return number


def boolean(value: str) -> bool:
    """Return True for true/yes/on/1 and False for false/no/off/0 (any case)."""
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"expected one of {'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)}, not {value!r}")


def log_level(value: str) -> str:
    """Return one of debug, info, warning or error (any case in, lower case out)."""
    level = value.strip().lower()
    if level not in LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, not {value!r}")
    return level


def grpc_log_level(value: str) -> str:
    """Return one of off, error, warning or info (any case in, lower case out)."""
    level = value.strip().lower()
    if level not in GRPC_LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(GRPC_LOG_LEVELS)}, not {value!r}")
    return level


def integer(low: int, high: int) -> Callable[[str], int]:
    """Return a parser of whole numbers from low to high inclusive."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"expected a whole number from {low} to {high}, not {value!r}") from None
        if not low <= number <= high:
            raise ValueError(f"expected a whole number from {low} to {high}, not {value!r}")
        return number

    return parse


port = integer(0, 65535)


def zero_or_integer(low: int, high: int) -> Callable[[str], int]:
    """Return a parser of 0 (usually "no limit") or a whole number from low to high inclusive."""
    within = integer(low, high)

    def parse(value: str) -> int:
        try:
            return 0 if int(value) == 0 else within(value)
        except ValueError:
            raise ValueError(f"expected 0 or a whole number from {low} to {high}, not {value!r}") from None

    return parse


def networks(value: str) -> tuple[Network, ...]:
    """Return comma-separated IP addresses and networks in CIDR form (``127.0.0.1``, ``10.0.0.0/8``,
    ``fd00::/8``), each as a network (an address is a network of one); an empty value is none. A
    network with bits set beyond its prefix (``10.0.0.1/8``) is refused: which was meant is unclear."""
    found = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        try:
            found.append(ipaddress.ip_network(item))
        except ValueError as exc:
            raise ValueError(f"expected IP addresses or CIDR networks (10.0.0.0/8), comma-separated: {exc}") from None
    return tuple(found)


def non_empty(value: str) -> str:
    """Return value, which must not be empty or only whitespace."""
    if not value.strip():
        raise ValueError("expected a value, not an empty one")
    return value


def target(value: str) -> str:
    """Return an address to listen on or to call: ``host:port``, ``[IPv6]:port`` or a ``unix:`` target;
    a missing port is refused (gRPC would quietly use 443)."""
    if not value.strip():
        raise ValueError("expected host:port, not an empty value")
    return addresses.check_address(value)


def targets(value: str) -> str:
    """Return a target to call: one address ``target`` takes, or several IP addresses of one family,
    comma-separated (``10.0.0.5:50051,10.0.0.6:50051``), over which the calls are spread."""
    if not value.strip():
        raise ValueError("expected host:port, not an empty value")
    return addresses.check_targets(value)


def path(value: str) -> Path:
    """Return value as a path (checked when the file is used)."""
    return Path(value)


def readable_file(value: str) -> Path:
    """Return the path of an existing, readable regular file."""
    file = Path(value)
    try:
        with file.open("rb"):
            pass
    except OSError as exc:
        raise ValueError(f"expected a readable file, not {value!r} ({exc.strerror or exc})") from None
    if not file.is_file():
        raise ValueError(f"expected a readable file, not {value!r} (not a regular file)")
    return file
