"""Secrets and the cleartext rule: tokens and URLs read from files (kept out of command lines and
the environment, never quoted in an error), checkpoint keys named by position, and a client's TLS:
the CA bundle it trusts and the opt-in to send a bearer token without TLS."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from decisionflow_server.foundation.settings._parsers import boolean, non_empty, readable_file
from decisionflow_server.foundation.settings._setting import Setting
from decisionflow_server.foundation.token_files import read_token_file

T = TypeVar("T")


def token_file(value: str) -> str:
    """Return the bearer token held in the file at value (see ``decisionflow_server.foundation.token_files``: printable
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


def in_file(setting: Setting[T], help: str) -> Setting[T]:
    """The setting that gives setting's value in a file instead (``--<flag>-file``, ``<ENV>_FILE``): the
    file's text through setting's own parser, so a secret stays out of command lines and the environment."""
    return Setting(setting.key + "_file", setting.env + "_FILE", help, parse=from_file(setting.parse))


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


def database_url_file_setting(service: str) -> Setting[str]:
    """The ``--database-url-file`` setting of a server (``DECISIONFLOW_<SERVICE>_DATABASE_URL_FILE``):
    the database URL read from a file, so its password stays out of command lines and the environment."""
    return Setting(
        "database_url_file",
        f"DECISIONFLOW_{service}_DATABASE_URL_FILE",
        "file holding the database URL, in place of --database-url (give one of the two)",
        parse=from_file(non_empty),
    )


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


def client_tls_settings(
    key_prefix: str, env_prefix: str, ca_help: str, whom: str
) -> tuple[Setting[Path], Setting[bool]]:
    """How a client reaches whom over TLS: the CA bundle it trusts (``--<prefix>ca-file``, ``<PREFIX>CA_FILE``;
    unset: no TLS) and the opt-in to send its bearer token without TLS beyond loopback
    (``--<prefix>insecure-cleartext-token``)."""
    ca_file = Setting(key_prefix + "ca_file", env_prefix + "CA_FILE", ca_help, parse=readable_file)
    cleartext = cleartext_token_setting(
        key_prefix + "insecure_cleartext_token", env_prefix + "INSECURE_CLEARTEXT_TOKEN", whom
    )
    return ca_file, cleartext
