"""Configuration settings: one declaration per setting gives its flag, environment variable,
default, help text and typed parser, so the command line, the environment, the README's
configuration reference and the checks on each value cannot drift apart.

A value comes from the flag if given, else the environment, else the default. A setting with no
default that is unset, or set to the empty string, is None. Every other value goes through the
setting's parser; a parser raises ValueError saying what it accepts, and ``parse_settings`` turns
that into a SettingError naming the flag and the environment variable, which each command reports
as a usage error (exit status 2).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from decisionflow import addresses
from decisionflow.token_files import read_token_file

T = TypeVar("T")

LOG_LEVELS = ("debug", "info", "warning", "error")
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


class SettingError(ValueError):
    """A setting's value is unusable; the message names the flag, the environment variable and the accepted form."""


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


def seconds(value: str) -> float:
    """Return a finite, non-negative number of seconds (0 allowed)."""
    return _seconds(value, positive=False)


def positive_seconds(value: str) -> float:
    """Return a finite number of seconds greater than zero."""
    return _seconds(value, positive=True)


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


def token_file(value: str) -> str:
    """Return the bearer token held in the file at value (see ``decisionflow.token_files``: printable
    text without spaces, in a file no one else may write)."""
    return read_token_file(value)


def from_file(parse: Callable[[str], T]) -> Callable[[str], T]:
    """Return a parser of a file's path: the file's UTF-8 text, surrounding whitespace stripped, goes
    through parse. For secrets kept out of command lines and the environment; a parse error never
    quotes the file's text."""

    def parse_file(value: str) -> T:
        try:
            content = Path(value).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"cannot read {value!r}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ValueError(f"{value!r} is not UTF-8 text") from None
        try:
            return parse(content)
        except ValueError as exc:
            raise ValueError(f"{value!r}: {exc}") from None

    return parse_file


def checkpoint_keys(min_bytes: int) -> Callable[[str], tuple[bytes, ...]]:
    """Return a parser of comma-separated HMAC keys, each at least min_bytes bytes (UTF-8) after
    stripping; at least one key."""

    def parse(value: str) -> tuple[bytes, ...]:
        keys = tuple(key.strip().encode() for key in value.split(",") if key.strip())
        if not keys:
            raise ValueError(f"expected comma-separated keys of at least {min_bytes} bytes each, not an empty list")
        short = [index for index, key in enumerate(keys, 1) if len(key) < min_bytes]
        if short:
            # The keys are secrets: name their positions, never their text.
            raise ValueError(f"every key must be at least {min_bytes} bytes; key {short[0]} of {len(keys)} is shorter")
        return keys

    return parse


# A setting declared without a parser keeps its text as given (its type is then Any to mypy).
_AS_GIVEN: Callable[[str], Any] = text


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """One configuration value: ``--flag`` on the command line or ``env`` in the environment,
    turned into its type by ``parse``."""

    key: str
    env: str
    help: str
    default: str | None = None
    flag_only: bool = False  # no environment variable: given on the command line or not at all
    parse: Callable[[str], T] = _AS_GIVEN
    switch: bool = False  # a flag without a value, such as --once; implies flag_only

    @property
    def flag(self) -> str:
        """The command-line flag for this setting."""
        return "--" + self.key.replace("_", "-")

    @property
    def names(self) -> str:
        """The flag and (unless flag-only) the environment variable, as error messages name them."""
        return self.flag if self.flag_only or self.switch else f"{self.flag} (env {self.env})"


def log_level_setting(service: str, default: str) -> Setting[str]:
    """The ``--log-level`` setting of a service (``DECISIONFLOW_<SERVICE>_LOG_LEVEL``)."""
    return Setting(
        "log_level", f"DECISIONFLOW_{service}_LOG_LEVEL", "debug, info, warning or error", default, parse=log_level
    )


def shutdown_grace_setting(service: str) -> Setting[float]:
    """The ``--shutdown-grace-seconds`` setting of a server (``DECISIONFLOW_<SERVICE>_SHUTDOWN_GRACE_SECONDS``)."""
    return Setting(
        "shutdown_grace_seconds",
        f"DECISIONFLOW_{service}_SHUTDOWN_GRACE_SECONDS",
        "on SIGTERM/SIGINT, how long calls in flight may finish",
        "10",
        parse=seconds,
    )


MAX_WORKERS = 64


def workers_setting(service: str) -> Setting[int]:
    """The ``--workers`` setting of a server (``DECISIONFLOW_<SERVICE>_WORKERS``): how many processes serve
    its port (SO_REUSEPORT), each with its own server and database pool."""
    return Setting(
        "workers",
        f"DECISIONFLOW_{service}_WORKERS",
        "server processes sharing the port (SO_REUSEPORT), each with its own database pool; forked at start, "
        "before any gRPC object exists",
        "1",
        parse=integer(1, MAX_WORKERS),
    )


def check_workers_address(
    workers: int, address: str, workers_setting: Setting[int], address_setting: Setting[str]
) -> None:
    """Refuse several workers on a unix socket: only a TCP port can be shared (SO_REUSEPORT)."""
    if workers > 1 and address.startswith(addresses.UNIX_SCHEMES):
        raise SettingError(
            f"{workers_setting.names}: {workers} workers need a host:port address to share, not {address!r} "
            f"({address_setting.names})"
        )


def database_url_file_setting(service: str) -> Setting[str]:
    """The ``--database-url-file`` setting of a server (``DECISIONFLOW_<SERVICE>_DATABASE_URL_FILE``):
    the database URL read from a file, so its password stays out of command lines and the environment."""
    return Setting(
        "database_url_file",
        f"DECISIONFLOW_{service}_DATABASE_URL_FILE",
        "file holding the database URL, in place of --database-url (give one of the two)",
        parse=from_file(non_empty),
    )


@dataclass(frozen=True, slots=True)
class TransportSettings:
    """A server's transport limits, one setting each (see ``transport_settings``)."""

    max_concurrent_streams: Setting[int]
    max_connection_idle_seconds: Setting[float]
    max_connection_age_seconds: Setting[float]
    max_connection_age_grace_seconds: Setting[float]
    max_connections: Setting[int]
    max_connections_per_peer: Setting[int]
    first_call_timeout_seconds: Setting[float]

    @property
    def all(self) -> tuple[Setting[Any], ...]:
        """Every transport setting, in the order the help and the README list them."""
        return (
            self.max_concurrent_streams,
            self.max_connection_idle_seconds,
            self.max_connection_age_seconds,
            self.max_connection_age_grace_seconds,
            self.max_connections,
            self.max_connections_per_peer,
            self.first_call_timeout_seconds,
        )


def transport_settings(service: str) -> TransportSettings:
    """The transport limits of a server (``DECISIONFLOW_<SERVICE>_...``): concurrent streams per
    connection, connection idle time, age and grace, a cap on connections, the share of it one peer
    address may hold and the time a connection may stay open without a call."""
    prefix = f"DECISIONFLOW_{service}_"
    return TransportSettings(
        Setting(
            "max_concurrent_streams",
            prefix + "MAX_CONCURRENT_STREAMS",
            "calls one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)",
            "64",
            parse=integer(1, 10_000),
        ),
        Setting(
            "max_connection_idle_seconds",
            prefix + "MAX_CONNECTION_IDLE_SECONDS",
            "close (GOAWAY) a connection that has had no call for this long",
            "300",
            parse=positive_seconds,
        ),
        Setting(
            "max_connection_age_seconds",
            prefix + "MAX_CONNECTION_AGE_SECONDS",
            "close (GOAWAY) a connection this old; clients reconnect",
            "1800",
            parse=positive_seconds,
        ),
        Setting(
            "max_connection_age_grace_seconds",
            prefix + "MAX_CONNECTION_AGE_GRACE_SECONDS",
            "after that GOAWAY, how long calls in flight may finish before the connection is cut",
            "30",
            parse=seconds,
        ),
        Setting(
            "max_connections",
            prefix + "MAX_CONNECTIONS",
            "connections the server holds at once; beyond it a new connection is closed",
            "1000",
            parse=integer(1, 1_000_000),
        ),
        Setting(
            "max_connections_per_peer",
            prefix + "MAX_CONNECTIONS_PER_PEER",
            "connections one peer address may hold; the excess is closed; unset: half of --max-connections",
            parse=integer(1, 1_000_000),
        ),
        Setting(
            "first_call_timeout_seconds",
            prefix + "FIRST_CALL_TIMEOUT_SECONDS",
            "close a connection on which no authenticated call came this long after it opened "
            "(health checks do not count)",
            "10",
            parse=positive_seconds,
        ),
    )


PORT_FILE = Setting("port_file", "", "write the bound port to this file once serving", flag_only=True, parse=path)


def add_settings(parser: argparse.ArgumentParser, settings: Sequence[Setting[Any]]) -> None:
    """Add one option per setting; its value defaults to None so the environment can fill it."""
    for setting in settings:
        if setting.switch:
            parser.add_argument(
                setting.flag, dest=setting.key, action="store_const", const="true", default=None, help=setting.help
            )
            continue
        env_note = "" if setting.flag_only else f" [env {setting.env}]"
        default_note = "" if setting.default is None else f" (default: {setting.default})"
        parser.add_argument(setting.flag, dest=setting.key, default=None, help=setting.help + env_note + default_note)


def resolve(
    namespace: argparse.Namespace, settings: Sequence[Setting[Any]], environ: Mapping[str, str]
) -> dict[str, str | None]:
    """Return each setting's text: the flag if given, else the environment, else the default."""
    values: dict[str, str | None] = {}
    for setting in settings:
        value = getattr(namespace, setting.key, None)
        if value is None and not (setting.flag_only or setting.switch):
            value = environ.get(setting.env)
        values[setting.key] = setting.default if value is None else value
    return values


class SettingValues:
    """The parsed value of each setting, looked up by its declaration so the type follows."""

    def __init__(self, values: Mapping[str, object], given: frozenset[str] = frozenset()) -> None:
        self._values = dict(values)
        self._given = given  # keys set by a flag or the environment, not by a default

    def __getitem__(self, setting: Setting[T]) -> T | None:
        """Return the setting's parsed value, None when it is unset and has no default."""
        return cast("T | None", self._values[setting.key])

    def required(self, setting: Setting[T]) -> T:
        """Return the setting's parsed value; raise SettingError when it is unset."""
        value = self[setting]
        if value is None:
            raise SettingError(f"{setting.names} is required")
        return value

    def one_of(self, direct: Setting[T], in_file: Setting[T]) -> T | None:
        """Return in_file's value if it was given, else direct's (its default when unset); raise
        SettingError when both were given, since which one wins would be a guess."""
        if in_file.key in self._given:
            if direct.key in self._given:
                raise SettingError(f"give {direct.names} or {in_file.names}, not both")
            return self[in_file]
        return self[direct]

    def required_one_of(self, direct: Setting[T], in_file: Setting[T]) -> T:
        """Return one_of(direct, in_file); raise SettingError when neither is set."""
        value = self.one_of(direct, in_file)
        if value is None:
            raise SettingError(f"{direct.names} is required (or give {in_file.names})")
        return value


def parse_settings(
    namespace: argparse.Namespace, settings: Sequence[Setting[Any]], environ: Mapping[str, str]
) -> SettingValues:
    """Return every setting parsed by its own parser; raise SettingError naming the first bad one."""
    parsed: dict[str, object] = {}
    given: set[str] = set()
    for setting in settings:
        raw = resolve(namespace, (setting,), environ)[setting.key]
        if resolve(namespace, (replace(setting, default=None),), environ)[setting.key]:
            given.add(setting.key)
        if setting.switch:
            parsed[setting.key] = raw is not None
        elif raw is None or (raw == "" and setting.default is None):
            parsed[setting.key] = None
        else:
            try:
                parsed[setting.key] = setting.parse(raw)
            except ValueError as exc:
                raise SettingError(f"{setting.names}: {exc}") from None
    return SettingValues(parsed, frozenset(given))


def markdown_table(title: str, settings: Sequence[Setting[Any]]) -> str:
    """Return the settings as a Markdown table for the README's configuration reference."""
    lines = [f"#### {title}", "", "| flag | environment | default | meaning |", "|---|---|---|---|"]
    for s in settings:
        env = "" if s.flag_only else f"`{s.env}`"
        default = "" if s.default is None else f"`{s.default}`"
        lines.append(f"| `{s.flag}` | {env} | {default} | {s.help} |")
    return "\n".join(lines) + "\n"


def cleartext_token_setting(key: str, env: str, whom: str) -> Setting[bool]:
    """The opt-in to send the bearer token to whom without TLS beyond loopback (default false: refused)."""
    return Setting(
        key,
        env,
        f"true: send the bearer token to {whom} without TLS even beyond loopback (anyone on the path can read "
        "and replay it); without it a token and no CA file are refused for a target that is not localhost, "
        "127.x or ::1",
        "false",
        parse=boolean,
    )


MIGRATE_MODES = ("auto", "off")


def migrate_mode(value: str) -> bool:
    """Return True for ``auto`` (migrate at start) and False for ``off`` (any case)."""
    mode = value.strip().lower()
    if mode not in MIGRATE_MODES:
        raise ValueError(f"expected auto or off, not {value!r}")
    return mode == "auto"


def migrate_setting(service: str, program: str) -> Setting[bool]:
    """The ``--migrate`` setting of a server (``DECISIONFLOW_<SERVICE>_MIGRATE``): auto or off."""
    return Setting(
        "migrate",
        f"DECISIONFLOW_{service}_MIGRATE",
        "auto: bring the database to the newest schema at start; off: refuse to start unless it is there "
        f"already (run `{program} migrate` first, as production upgrades do)",
        "auto",
        parse=migrate_mode,
    )


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """A service's Prometheus endpoint: its port (unset: no endpoint) and the address it binds."""

    port: Setting[int]
    address: Setting[str]

    @property
    def all(self) -> tuple[Setting[Any], ...]:
        """Both settings, in the order the help and the README list them."""
        return (self.port, self.address)


def metrics_settings(service: str, *, port_note: str = "", workers: bool = False) -> MetricsSettings:
    """The ``--metrics-port`` and ``--metrics-address`` settings of a service
    (``DECISIONFLOW_<SERVICE>_METRICS_PORT`` / ``_METRICS_ADDRESS``); off unless a port is given."""
    prefix = f"DECISIONFLOW_{service}_"
    return MetricsSettings(
        Setting(
            "metrics_port",
            prefix + "METRICS_PORT",
            f"serve Prometheus metrics over HTTP at this port{port_note}; unset: none, 0 picks a free one"
            + ("; with --workers N, worker i (from 0) serves its own at this port + i" if workers else ""),
            parse=port,
        ),
        Setting(
            "metrics_address",
            prefix + "METRICS_ADDRESS",
            "address the metrics endpoint binds (0.0.0.0 lets a Prometheus in another container scrape it)",
            "127.0.0.1",
            parse=non_empty,
        ),
    )
